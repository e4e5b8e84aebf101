"""The whole system in the test process (every service, the API, real NATS and PostgreSQL,
the fake model over HTTP), and hostile tenants: one that holds only its own API key, and
one that calls every route with another tenant's ids."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import (
    ADMIN,
    Client,
    client as tenant,  # noqa: F401 (a tenant with an agency)
    system_api,  # noqa: F401
)
from tests.helpers import assert_eventually

ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def save(client: Client, blueprint: dict[str, Any]) -> httpx.Response:
    return await client.http.post(f"/agency/{client.agency}/blueprints", json=blueprint)


async def events(client: Client, thread: str) -> list[dict[str, Any]]:
    """Every event of the thread's tree, as the tenant reads them (`GET …/events`)."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        r = await client.http.get(
            f"{client.path(thread)}/events",
            params={"correlationId": thread, "fromSeq": after, "limit": 1000},
        )
        assert r.status_code == 200, r.text
        page = r.json()
        found.extend(page["events"])
        if not page["hasMore"] or not page["events"]:
            return found
        after = page["events"][-1]["streamSeq"] + 1


async def until_runs_end(
    client: Client, thread: str, runs: int = 1, timeout: float = 30
) -> list[dict[str, Any]]:
    """The tree's events once `runs` runs of the thread itself have ended."""

    async def ended() -> list[dict[str, Any]]:
        tree = await events(client, thread)
        own = [e for e in tree if e.get("threadId", thread) == thread]
        assert sum(e["type"] in RUN_TERMINAL_TYPES for e in own) >= runs
        return tree

    return await assert_eventually(ended, timeout=timeout)


def text_of(found: list[dict[str, Any]]) -> str:
    return json.dumps(found)


@pytest.fixture
def system_url(system_api: tuple[str, FakeLLMServer]) -> str:  # noqa: F811
    return system_api[0]


@dataclass(frozen=True)
class Tenant:
    id: str
    key: str
    agency: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture
async def http(system_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=system_url, timeout=30) as client:
        yield client


async def new_tenant(http: httpx.AsyncClient, name: str) -> Tenant:
    """A tenant with an API key and one agency."""
    r = await http.post("/tenants", json={"name": name}, headers=ADMIN_AUTH)
    assert r.status_code == 201, r.text
    tenant_id, key = r.json()["tenantId"], r.json()["apiKey"]
    r = await http.post(
        "/agencies", json={"name": name}, headers={"Authorization": f"Bearer {key}"}
    )
    assert r.status_code == 201, r.text
    return Tenant(id=tenant_id, key=key, agency=r.json()["id"])


@pytest.fixture
async def tenant_a(http: httpx.AsyncClient) -> Tenant:
    return await new_tenant(http, "a")


@pytest.fixture
async def tenant_b(http: httpx.AsyncClient) -> Tenant:
    return await new_tenant(http, "b")
