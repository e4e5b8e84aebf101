"""The whole system, its fake model answering after 0.3 to 0.6 s as a real one would, and
AG-UI's own client (`@ag-ui/client`, run in node) pointed at `/agui` with a fresh tenant's
key. The API allows the browser pages of this machine and `APP_ORIGIN` (CORS) and trusts
the tests' proxies at 127.0.0.1. One system for the package: systems share the session's
durable consumers."""

from __future__ import annotations

import json
import uuid
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
async def agui_system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    async with system_with_llm(
        nats_url, database_url, nats_server, SETTINGS, latency_ms=(300, 600)
    ) as system:
        yield system


@dataclass
class Tenant:
    url: str
    llm: FakeLLMServer
    key: str
    id: str
    agency: str
    bus: Bus

    def route(self, blueprint: str, agency: str | None = None) -> str:
        return f"{self.url}/agui/{agency or self.agency}/{blueprint}"

    async def client(
        self,
        blueprint: str,
        turns: list[dict[str, Any]],
        thread: str | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Run `turns` with the AG-UI client on one thread (a new one unless named), its
        agent holding `messages` to start with (none unless given)."""
        plan = {
            "messages": messages or [],
            "url": self.route(blueprint),
            "key": self.key,
            "threadId": thread or str(uuid.uuid4()),
            "turns": turns,
        }
        answer = await run_node("agui.mjs", json.dumps(plan))
        assert isinstance(answer, dict)
        return answer

    async def post(self, blueprint: str, body: Any, **headers: str) -> httpx.Response:
        """The route as any HTTP client posts to it; the answer read whole."""
        auth = {"Authorization": f"Bearer {self.key}", **headers}
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(self.route(blueprint), json=body, headers=auth)


@pytest.fixture
async def tenant(agui_system: System, bus: Bus) -> Tenant:
    """A fresh tenant with an agency named `default`."""
    key, tenant_id, agency = await new_tenant(agui_system.url, "agui")
    return Tenant(agui_system.url, agui_system.llm, key, tenant_id, agency, bus)


def frames(body: str) -> list[dict[str, Any]]:
    """The AG-UI events of an SSE body, in order."""
    return [
        json.loads(line.removeprefix("data: "))
        for line in body.splitlines()
        if line.startswith("data: ")
    ]


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")


@pytest.fixture
async def other(agui_system: System, bus: Bus) -> Tenant:
    """A second fresh tenant."""
    key, tenant_id, agency = await new_tenant(agui_system.url, "agui-other")
    return Tenant(agui_system.url, agui_system.llm, key, tenant_id, agency, bus)
