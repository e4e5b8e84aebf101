"""The whole system in the test process (every service, the API, real NATS and PostgreSQL,
the fake model over HTTP), attacked over HTTP by one tenant with another tenant's ids."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from infra.jetstream.connection import Bus
from infra.launch import NatsServer
from services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, running_system

ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


@dataclass(frozen=True)
class Tenant:
    id: str
    key: str
    agency: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="package")
async def system_url(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[str]:
    async with (
        FakeLLMServer(instant=True) as llm,
        running_system(nats_url, database_url, nats_server, llm) as url,
    ):
        yield url


@pytest.fixture
async def http(system_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=system_url, timeout=30) as client:
        yield client


async def new_tenant(http: httpx.AsyncClient, name: str) -> Tenant:
    """A tenant with an API key and one agency."""
    r = await http.post("/tenants", json={"name": name}, headers=ADMIN_AUTH)
    assert r.status_code == 201, r.text
    tenant, key = r.json()["tenantId"], r.json()["apiKey"]
    r = await http.post(
        "/agencies", json={"name": name}, headers={"Authorization": f"Bearer {key}"}
    )
    assert r.status_code == 201, r.text
    return Tenant(id=tenant, key=key, agency=r.json()["id"])


@pytest.fixture
async def tenant_a(http: httpx.AsyncClient) -> Tenant:
    return await new_tenant(http, "a")


@pytest.fixture
async def tenant_b(http: httpx.AsyncClient) -> Tenant:
    return await new_tenant(http, "b")
