"""The whole system with a fake model that takes 0.3 to 0.8 s per answer, and the AI SDK's
chat (node, tests/js/aisdk.mjs) pointed at a fresh tenant's `/aisdk` chat route.

One system for this package: systems share the session's NATS and its durable consumers,
so two alive at once would take each other's runs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import System, system_with_llm
from tests.jsclients import run_node
from tests.langgraph.conftest import SETTINGS, new_tenant


@pytest.fixture(scope="package")
async def aisdk_system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    async with system_with_llm(
        nats_url, database_url, nats_server, SETTINGS, latency_ms=(300, 800)
    ) as system:
        yield system


@dataclass
class Tenant:
    url: str
    llm: FakeLLMServer
    key: str
    agency: str
    http: httpx.AsyncClient
    id: str = ""

    def chat_url(self, blueprint: str = "worker", base: str | None = None) -> str:
        return f"{base or self.url}/aisdk/{self.agency}/{blueprint}/chat"

    async def node(
        self, scenario: str, api: str | None = None, key: str | None = None, **params: Any
    ) -> Any:
        """Run a scenario of tests/js/aisdk.mjs against this tenant's chat (or `api`)."""
        env = {"AISDK_API": api or self.chat_url(), "AISDK_KEY": key or self.key}
        return await run_node("aisdk.mjs", scenario, json.dumps(params), env=env)


@pytest.fixture
async def tenant(aisdk_system: System) -> AsyncIterator[Tenant]:
    key, tenant_id, agency = await new_tenant(aisdk_system.url, "aisdk")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=aisdk_system.url, headers=headers, timeout=30) as http:
        yield Tenant(aisdk_system.url, aisdk_system.llm, key, agency, http, tenant_id)
