"""The whole system in the test process, driven over HTTP like a client would: every
service, the API, the projector, real NATS and PostgreSQL, the fake model over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agency.infra.db import create_pool, migrate
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.infra.nats_auth import SERVICE_ROLES, CredentialIssuer
from agency.projections.setup import prepare_read_models
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.server import run_api
from agency.services.api.tenant_scope import scope_session
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig, run_stack, service_runners
from tests.helpers import created_tenant, fresh_database
from tests.runtime.conftest import make_system
from tests.spans import spans  # noqa: F401

ADMIN = "admin-" + secrets.token_urlsafe(12)


@dataclass
class Client:
    http: httpx.AsyncClient
    llm: FakeLLMServer
    agency: str
    tenant: str = ""

    async def thread(self, agent_type: str = "worker") -> str:
        r = await self.http.post(f"/agency/{self.agency}/agents", json={"agentType": agent_type})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def path(self, thread: str) -> str:
        return f"/agency/{self.agency}/agent/{thread}"

    def write_endpoints(self, data_dir: Path) -> None:
        """The endpoints file the CLI reads from `data_dir`, naming this API and key."""
        key = self.http.headers["Authorization"].removeprefix("Bearer ")
        endpoints = Endpoints(
            pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
            api_url=str(self.http.base_url), api_key=key,
        )  # fmt: skip
        write_endpoints(data_dir, endpoints)

    async def invoke(self, thread: str, text: str, **extra: Any) -> str:
        body = {"messages": [{"role": "user", "content": text}], **extra}
        r = await self.http.post(f"{self.path(thread)}/invoke", json=body)
        assert r.status_code == 202, r.text
        return str(r.json()["runId"])

    async def state(self, thread: str) -> dict[str, Any]:
        r = await self.http.get(f"{self.path(thread)}/state")
        assert r.status_code == 200, r.text
        result: dict[str, Any] = r.json()
        return result

    async def until(
        self,
        thread: str,
        check: Callable[[dict[str, Any]], bool],
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Poll `/state` (a read model: it follows the log) until `check` holds."""
        async with asyncio.timeout(timeout):
            while True:
                state = await self.state(thread)
                if check(state):
                    return state
                await asyncio.sleep(0.1)


@dataclass(frozen=True)
class System:
    """A running system's API URL, and the fake model its runs call."""

    url: str
    llm: FakeLLMServer


@asynccontextmanager
async def system_with_llm(
    nats_url: str,
    database_url: str,
    nats_server: NatsServer | None,
    settings: ApiSettings | None = None,
    *,
    latency_ms: tuple[int, int] = (20, 80),
) -> AsyncIterator[System]:
    """`running_system` with a fake model answering in `latency_ms` (a range)."""
    async with (
        FakeLLMServer(instant=True, latency_ms=latency_ms) as llm,
        running_system(nats_url, database_url, nats_server, llm, settings) as url,
    ):
        yield System(url=url, llm=llm)


@asynccontextmanager
async def running_system(
    nats_url: str,
    database_url: str,
    nats_server: NatsServer | None,
    llm: FakeLLMServer,
    settings: ApiSettings | None = None,
    *,
    workers: int = 1,
) -> AsyncIterator[str]:
    """Every service and the API (with `settings`), on a database of their own; yields the
    API's URL. `workers`: copies of the runtime and the subagents coordinator."""
    async with running_apis(
        nats_url, database_url, nats_server, llm, settings, workers=workers
    ) as urls:
        yield urls[0]


@asynccontextmanager
async def running_apis(
    nats_url: str,
    database_url: str,
    nats_server: NatsServer | None,
    llm: FakeLLMServer,
    settings: ApiSettings | None = None,
    apis: int = 1,
    *,
    workers: int = 1,
) -> AsyncIterator[list[str]]:
    """Every service and `apis` API servers, each with its own connection and caches as a
    process of its own would have, on a database of their own; yields their URLs.
    `workers`: copies of the runtime and the subagents coordinator, as several processes."""
    db_url = await fresh_database(database_url, "e")
    pool = await create_pool(db_url, max_size=10, setup=scope_session)
    async with pool.acquire() as conn:
        await migrate(conn)
    await prepare_read_models(pool)
    stop = asyncio.Event()
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    system = make_system()
    # Each service connects as its own user, with the permissions `agency up` gives it.
    auth = nats_server.auth if nats_server is not None else None
    urls = {r: auth.url(nats_server.url, r) for r in SERVICE_ROLES} if auth and nats_server else {}
    settings = settings or ApiSettings(admin_secret=ADMIN)
    config = StackConfig(
        nats_url=nats_url,
        database_url=db_url,
        system=system,
        provider=provider,
        nats_urls=urls,
        # A tenant's deletion finished by the `erasures` consumer removes its NATS user.
        nats_credentials=CredentialIssuer(auth, nats_server.url) if auth and nats_server else None,
    )
    if workers > 1:
        runners = service_runners(config)
        extra = {
            f"{name}-{n}": runners[name]
            for name in ("runtime", "subagents")
            for n in range(2, workers + 1)
        }
        config = dataclasses.replace(config, extra=extra, services=(*config.services, *extra))
    tasks = [asyncio.create_task(run_stack(config, stop))]
    buses: list[Bus] = []
    started: list[asyncio.Future[str]] = []
    try:
        for n in range(apis):
            api_bus = await Bus(urls.get("api", nats_url), name=f"e2e-api-{n}").connect()
            buses.append(api_bus)
            deps = ApiDeps(pool=pool, bus=api_bus, system=system, settings=settings)
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            started.append(ready)
            tasks.append(asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, ready.set_result)))
        yield [await asyncio.wait_for(asyncio.shield(ready), timeout=20) for ready in started]
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
        await provider.close()
        for api_bus in buses:
            await api_bus.close()
        await asyncio.wait_for(pool.close(), timeout=10)


@pytest.fixture(scope="package")
async def system_api(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[tuple[str, FakeLLMServer]]:
    async with (
        FakeLLMServer(instant=True) as llm,
        running_system(nats_url, database_url, nats_server, llm) as url,
    ):
        yield url, llm


@pytest.fixture
async def client(system_api: tuple[str, FakeLLMServer]) -> AsyncIterator[Client]:
    url, llm = system_api
    async with httpx.AsyncClient(base_url=url, timeout=20) as admin:
        key, tenant, agency = await created_tenant(admin, ADMIN, "e2e", "e2e")
    assert agency is not None
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, timeout=20, headers=headers) as http:
        yield Client(http=http, llm=llm, agency=agency, tenant=tenant)
