"""The whole system with a fake model that takes a few hundred milliseconds per answer, and
the official `a2a-sdk` client pointed at a blueprint's agent card with a fresh tenant's key.

The API trusts the `X-Forwarded-*` of a proxy at 127.0.0.1 (as the tests' proxies are).
One system for the package: systems share the session's NATS and its durable consumers,
so two alive at once would take each other's runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import AgentCard, TaskPushNotificationConfig

from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.services.api.deps import ApiSettings
from agency.services.api.forwarded import TrustedProxies
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, System, system_with_llm
from tests.langgraph.conftest import new_tenant

# The vendored TCK's own tests run only under `just tck` (tck.py), against the system.
collect_ignore = ["vendor"]

JSONRPC = "JSONRPC"
HTTP_JSON = "HTTP+JSON"
BINDINGS = [JSONRPC, HTTP_JSON]
SETTINGS = ApiSettings(admin_secret=ADMIN, trusted_proxies=TrustedProxies.parse("127.0.0.1"))


@pytest.fixture(scope="package", autouse=True)
def allow_loopback() -> Iterator[None]:
    """The operator's allowance for the tests' push-notification receiver on loopback, set
    before the system starts: no delivery reaches a private address otherwise."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
        yield


@pytest.fixture(scope="package")
async def a2a_system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    async with system_with_llm(
        nats_url, database_url, nats_server, SETTINGS, latency_ms=(300, 600)
    ) as system:
        yield system


@dataclass
class Tenant:
    """A new tenant with an agency named `default`, and an HTTP client with its key."""

    url: str
    llm: FakeLLMServer
    key: str
    id: str
    agency: str
    http: httpx.AsyncClient

    def agent_url(self, blueprint: str) -> str:
        return f"{self.url}/a2a/{self.agency}/{blueprint}"

    async def card(self, blueprint: str) -> AgentCard:
        resolver = A2ACardResolver(self.http, self.agent_url(blueprint))
        return await resolver.get_agent_card()

    @asynccontextmanager
    async def client(
        self,
        blueprint: str,
        binding: str = JSONRPC,
        *,
        streaming: bool = True,
        push: TaskPushNotificationConfig | None = None,
    ) -> AsyncIterator[Client]:
        """The SDK's client for the blueprint's card, speaking `binding` (`push`: the
        config it sends with each message)."""
        config = ClientConfig(
            httpx_client=self.http,
            streaming=streaming,
            supported_protocol_bindings=[binding],
            push_notification_config=push,
        )
        client = ClientFactory(config).create(await self.card(blueprint))
        try:
            yield client
        finally:
            await client.close()


@pytest.fixture
async def tenant(a2a_system: System) -> AsyncIterator[Tenant]:
    key, tenant_id, agency = await new_tenant(a2a_system.url, "a2a")
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        yield Tenant(a2a_system.url, a2a_system.llm, key, tenant_id, agency, http)
