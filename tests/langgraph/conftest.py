"""The whole system with the fake model answering after some latency, and the official
`langgraph-sdk` client pointed at its `/langgraph` routes with a fresh tenant's key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.services.api.cors import CorsSettings
from agency.services.api.deps import ApiSettings
from agency.services.api.forwarded import TrustedProxies
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.tenancy.fairness import ScheduleLimits
from tests.e2e.conftest import ADMIN, running_apis
from tests.helpers import created_tenant

# A browser app's origin the operator allowed, besides pages on this machine.
APP_ORIGIN = "https://app.example"
# The reverse proxies of the tests run on this machine: their `X-Forwarded-*` are believed.
SETTINGS = ApiSettings(
    admin_secret=ADMIN,
    cors=CorsSettings.parse(f"{APP_ORIGIN}, local"),
    trusted_proxies=TrustedProxies.parse("127.0.0.1"),
    # The crons of these tests tick every second.
    schedules=ScheduleLimits(min_interval=1.0, fires_per_minute=0.0),
)


@dataclass
class LangGraph:
    client: LangGraphClient
    llm: FakeLLMServer
    agency: str
    url: str
    key: str
    tenant: str
    # Another API server on the same system, as a second process behind a balancer.
    other_url: str


@dataclass(frozen=True)
class System:
    url: str
    llm: FakeLLMServer
    other_url: str


@pytest.fixture(scope="package")
async def lg_system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    with pytest.MonkeyPatch.context() as env:
        # Threads past their `ttl` are looked for every second (docs/data.md, "Retention").
        env.setenv("AGENCY_RETENTION_SWEEP_SECONDS", "1")
        async with (
            FakeLLMServer(instant=True, latency_ms=(20, 80)) as llm,
            running_apis(nats_url, database_url, nats_server, llm, SETTINGS, apis=2) as urls,
        ):
            yield System(url=urls[0], llm=llm, other_url=urls[1])


async def new_tenant(url: str, name: str) -> tuple[str, str, str]:
    """A new tenant with an agency named `default`: its API key, its id and the agency's."""
    async with httpx.AsyncClient(base_url=url, timeout=20) as http:
        key, tenant, agency = await created_tenant(http, ADMIN, name, "default")
    assert agency is not None
    return key, tenant, agency


@pytest.fixture
async def lg(lg_system: System) -> AsyncIterator[LangGraph]:
    """A new tenant with an agency named `default`, and the SDK client for it."""
    url, llm = lg_system.url, lg_system.llm
    key, tenant, agency = await new_tenant(url, "lg")
    async with get_client(url=f"{url}/langgraph", api_key=key, timeout=60) as client:
        yield LangGraph(
            client=client,
            llm=llm,
            agency=agency,
            url=url,
            key=key,
            tenant=tenant,
            other_url=lg_system.other_url,
        )
