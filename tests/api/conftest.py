"""The API over real HTTP, with the real registry and projector behind it.

One server per test package (its own database, the session's NATS); every test works in
tenants of its own, created through `POST /tenants`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from nats.errors import Error as NatsError

from agency.contracts.events import (
    BlueprintSpec,
    ChatMessage,
    HitlInterrupt,
    MessageAppended,
    RequestAccepted,
    RunPaused,
    RunStarted,
    ToolCall,
)
from agency.contracts.ids import new_id
from agency.contracts.subjects import COMMANDS_STREAM
from agency.infra.db import create_pool, migrate
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.projections.catalog import ALL
from agency.services.agents.builtin.hitl import HitlMiddleware
from agency.services.agents.system import AgentSystem
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.keys import KeyCache
from agency.services.api.server import run_api
from agency.services.api.tenant_scope import scope_session
from agency.services.projector.service import run_projector
from agency.services.registry.service import run_registry
from tests.api.code_agents import TUNER, TUNER_SETTINGS, Tuner
from tests.api.stateful import COUNTED, BrokenState, MessageCounter
from tests.helpers import assert_eventually, fresh_database

MAX_BODY = 64 * 1024
STATIC_AGENT = "assistant"


@dataclass
class Api:
    url: str
    settings: ApiSettings
    deps: ApiDeps
    # The server's own database (services beside it, e.g. workflows, use it too).
    database_url: str = ""
    tenants: list[str] = field(default_factory=list)

    @property
    def admin(self) -> dict[str, str]:
        assert self.settings.admin_secret
        return {"Authorization": f"Bearer {self.settings.admin_secret}"}

    @property
    def ws_url(self) -> str:
        return "ws" + self.url.removeprefix("http")

    def write_endpoints(self, data_dir: Path) -> None:
        """The endpoints file the CLI reads from `data_dir` (`--data-dir`), naming this API."""
        endpoints = Endpoints(
            pid=os.getpid(), nats_url="", database_url="", api_url=self.url,
            admin_secret=self.settings.admin_secret,
        )  # fmt: skip
        write_endpoints(data_dir, endpoints)


@dataclass(frozen=True)
class Tenant:
    id: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass(frozen=True)
class Thread:
    tenant: Tenant
    agency_id: str
    thread_id: str

    @property
    def path(self) -> str:
        return f"/agency/{self.agency_id}/agent/{self.thread_id}"


async def _projections_started(pool: asyncpg.Pool) -> None:
    """Every projection has created its tables (it does so before its checkpoint row)."""

    async def started() -> None:
        names = await pool.fetchval(
            "SELECT array_agg(name) FROM agency_projection_checkpoints WHERE name = ANY($1)",
            [p.name for p in ALL],
        )
        assert sorted(names or []) == sorted(p.name for p in ALL)

    await assert_eventually(started, timeout=15)


@pytest.fixture(scope="package")
async def api(nats_url: str, database_url: str, bus: Bus) -> AsyncIterator[Api]:
    db_url = await fresh_database(database_url, "api")
    pool = await create_pool(db_url, max_size=8, setup=scope_session)
    async with pool.acquire() as conn:
        await migrate(conn)
    system = (
        AgentSystem()
        .add_agent(BlueprintSpec(name=STATIC_AGENT, prompt="You help."))
        .use(MessageCounter())
        .use(BrokenState())
        .use(HitlMiddleware())
        .add_agent(COUNTED)
        .code_agent(TUNER, Tuner, settings=TUNER_SETTINGS)
    )
    settings = ApiSettings(
        admin_secret="admin-" + secrets.token_urlsafe(16),
        shared_secret="shared-" + secrets.token_urlsafe(16),
        shared_secret_tenant="t" + new_id().lower(),
        max_body_bytes=MAX_BODY,
        read_your_writes_timeout=10.0,
        # No runtime runs here: an invoke's status stays `pending`; do not wait for it.
        invoke_status_timeout=0.05,
    )
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    api_bus = await Bus(nats_url, name="api-tests").connect()
    keys = KeyCache(flush_interval=0.2)
    deps = ApiDeps(pool=pool, bus=api_bus, system=system, settings=settings, keys=keys)
    server = asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, started.set_result))
    tasks = [
        asyncio.create_task(run_registry(nats_url, db_url, stop, system)),
        asyncio.create_task(run_projector(nats_url, db_url, stop, ALL)),
        server,
    ]
    api = Api(url="", settings=settings, deps=deps, database_url=db_url)
    try:
        await _projections_started(pool)
        # Fail at once, with the server's own error, if it dies while starting.
        first: list[asyncio.Future[Any]] = [started, server]
        await asyncio.wait(first, timeout=15, return_when=asyncio.FIRST_COMPLETED)
        if server.done():
            server.result()
        api.url = started.result()
        yield api
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)
        await _drop_commands(bus, api.tenants)
        await api_bus.close()
        await asyncio.wait_for(pool.close(), timeout=10)


async def _drop_commands(bus: Bus, tenants: list[str]) -> None:
    """No runtime runs here: leave no invokes behind for another package's runtime."""
    for tenant in tenants:
        with contextlib.suppress(NatsError, TimeoutError):
            await bus.js.purge_stream(COMMANDS_STREAM, subject=f"tenant.{tenant}.cmd.>")


@contextlib.asynccontextmanager
async def running_api(deps: ApiDeps) -> AsyncIterator[str]:
    """Another server on the same resources (e.g. with other settings); yields its URL."""
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, started.set_result))
    try:
        yield await asyncio.wait_for(asyncio.shield(started), timeout=10)
    finally:
        stop.set()
        await asyncio.wait_for(server, timeout=10)


@pytest.fixture
async def client(api: Api) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api.url, timeout=15) as c:
        yield c


async def create_tenant(client: httpx.AsyncClient, api: Api, name: str = "acme") -> Tenant:
    r = await client.post("/tenants", json={"name": name}, headers=api.admin)
    assert r.status_code == 201, r.text
    body = r.json()
    api.tenants.append(body["tenantId"])
    return Tenant(id=body["tenantId"], key=body["apiKey"])


async def create_agency(client: httpx.AsyncClient, tenant: Tenant) -> str:
    r = await client.post("/agencies", json={"name": "support"}, headers=tenant.auth)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def create_thread(client: httpx.AsyncClient, tenant: Tenant) -> Thread:
    agency_id = await create_agency(client, tenant)
    r = await client.post(
        f"/agency/{agency_id}/agents", json={"agentType": STATIC_AGENT}, headers=tenant.auth
    )
    assert r.status_code == 201, r.text
    return Thread(tenant, agency_id, r.json()["id"])


@pytest.fixture
async def tenant_a(client: httpx.AsyncClient, api: Api) -> Tenant:
    return await create_tenant(client, api, "a")


@pytest.fixture
async def tenant_b(client: httpx.AsyncClient, api: Api) -> Tenant:
    return await create_tenant(client, api, "b")


@pytest.fixture
async def thread_a(client: httpx.AsyncClient, tenant_a: Tenant) -> Thread:
    return await create_thread(client, tenant_a)


async def append_messages(bus: Bus, thread: Thread, *texts: str) -> list[RecordedEvent]:
    """Write events to the thread's log directly, one append per text, as a runtime would."""
    recorded: list[RecordedEvent] = []
    context = EventContext(agency_id=thread.agency_id, thread_id=thread.thread_id)
    for text in texts:
        position = await bus.store.last_position(thread.tenant.id, "thread", thread.thread_id)
        result = await bus.store.append(
            thread.tenant.id,
            "thread",
            thread.thread_id,
            [MessageAppended(message=ChatMessage(role="user", content=text))],
            expected=position,
            context=context,
        )
        recorded.extend(result.events)
    return recorded


async def paused_for_approval(bus: Bus, thread: Thread, run_id: str, call_id: str) -> None:
    """Write, as the runtime would, a run of `thread` paused on one call for approval (no
    runtime runs in these tests)."""
    call = ToolCall(id=call_id, name="lookup", arguments="{}")
    tenant, thread_id = thread.tenant.id, thread.thread_id
    position = await bus.store.last_position(tenant, "thread", thread_id)
    await bus.store.append(tenant, "thread", thread_id, [
        RequestAccepted(run_id=run_id, idempotency_key=run_id),
        RunStarted(run_id=run_id, agent_type=STATIC_AGENT, max_steps=5),
        MessageAppended(run_id=run_id, message=ChatMessage(role="assistant", tool_calls=(call,))),
        HitlInterrupt(run_id=run_id, proposed_tool_calls=(call,)),
        RunPaused(run_id=run_id, reason="hitl"),
    ], expected=position, context=EventContext(agency_id=thread.agency_id))  # fmt: skip
