"""The whole system (every service, the API, real NATS and PostgreSQL) with the fake model
answering after some latency; a fresh tenant per test, over HTTP and on the bus. And
(`system_api`, for tests/e2e's `client`) the same with two runtime and two subagents
workers and a fake model that takes 0.5 to 1 s per answer, as a real one would.

Each system lives for one module only: systems share the session's NATS and its durable
consumers, so two alive at once would take each other's runs to their own fake models,
and one module's scripts would meet another's model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx
import pytest

from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.launch import NatsServer
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, System, client, running_system, system_with_llm
from tests.helpers import ThreadWaits
from tests.langgraph.conftest import new_tenant

__all__ = ["client"]


@dataclass
class Tenant(ThreadWaits):
    wait_timeout: ClassVar[float] = 30.0

    http: httpx.AsyncClient
    admin: httpx.AsyncClient
    bus: Bus
    llm: FakeLLMServer
    key: str
    id: str
    agency: str

    async def thread(self, agent_type: str = "worker") -> str:
        r = await self.http.post(f"/agency/{self.agency}/agents", json={"agentType": agent_type})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def path(self, thread: str) -> str:
        return f"/agency/{self.agency}/agent/{thread}"

    async def invoke(self, thread: str, text: str, **extra: Any) -> httpx.Response:
        body = {"messages": [{"role": "user", "content": text}], **extra}
        return await self.http.post(f"{self.path(thread)}/invoke", json=body)

    async def events(self, thread: str) -> list[RecordedEvent]:
        return await self.bus.store.read(self.id, "thread", thread)


@pytest.fixture(scope="module")
async def fair_system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    async with system_with_llm(nats_url, database_url, nats_server) as system:
        yield system


@pytest.fixture
async def tenant(fair_system: System, bus: Bus) -> AsyncIterator[Tenant]:
    """A fresh tenant with an agency named `default`."""
    key, tenant_id, agency = await new_tenant(fair_system.url, "fair")
    auth = {"Authorization": f"Bearer {key}"}
    admin_auth = {"Authorization": f"Bearer {ADMIN}"}
    async with (
        httpx.AsyncClient(base_url=fair_system.url, timeout=30, headers=auth) as http,
        httpx.AsyncClient(base_url=fair_system.url, timeout=30, headers=admin_auth) as admin,
    ):
        yield Tenant(
            http=http, admin=admin, bus=bus, llm=fair_system.llm, key=key, id=tenant_id,
            agency=agency,
        )  # fmt: skip


@pytest.fixture(scope="module")
async def system_api(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[tuple[str, FakeLLMServer]]:
    async with (
        FakeLLMServer(instant=True, latency_ms=(500, 1000)) as llm,
        running_system(nats_url, database_url, nats_server, llm, workers=2) as url,
    ):
        yield url, llm
