"""The whole system but the webhooks service, which each test starts, stops or kills as it
needs (`Hooks`), a fake model that takes 0.3 to 0.8 s per answer, and a receiver on
loopback verifying each delivery as integrators do (`receiver.py`).

The system lives for this package only: systems share the session's NATS and its durable
consumers, so no other may be alive beside it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.infra.nats_auth import SERVICE_ROLES
from agency.infra.retry import RetryPolicy
from agency.projections.setup import prepare_read_models
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.server import run_api
from agency.services.api.tenant_scope import scope_session
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig, run_stack
from agency.services.webhooks.dispatch import DispatchSettings
from agency.services.webhooks.service import run_webhooks
from tests.e2e.conftest import ADMIN
from tests.helpers import fresh_database
from tests.langgraph.conftest import new_tenant
from tests.protocols.webhooks.receiver import Receiver, receiving
from tests.runtime.conftest import make_system

# Attempts a second or two apart, so a retried delivery arrives within a test's wait.
QUICK = RetryPolicy(attempts=None, timeout=60.0, wait_initial=0.5, wait_max=2.0, wait_jitter=0.1)
# A killed service's attempt under way is made again once its lease has passed.
DISPATCH = DispatchSettings(lease=3.0, poll=0.2, shutdown_grace=1.0)


@pytest.fixture(scope="package", autouse=True)
def allow_loopback() -> Iterator[None]:
    """The operator's allowance for the test receiver on loopback: no delivery reaches a
    private address otherwise (`services/egress.py`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
        yield


class Hooks:
    """The webhooks service, as a process the test starts, stops and kills."""

    def __init__(self, nats_url: str, database_url: str) -> None:
        self._nats_url = nats_url
        self._database_url = database_url
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        assert self._task is None or self._task.done()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(
            run_webhooks(
                self._nats_url,
                self._database_url,
                self._stop,
                ack_wait=5.0,
                dispatch=DISPATCH,
                schedule=QUICK,
            )
        )

    async def stop(self) -> None:
        """A graceful stop, bounded."""
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, timeout=30)

    async def kill(self) -> None:
        """Gone at once, as a killed process: nothing acknowledged or recorded after."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, timeout=30)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()


@dataclass(frozen=True)
class System:
    url: str
    llm: FakeLLMServer
    hooks: Hooks
    database_url: str


@pytest.fixture(scope="package")
async def webhook_system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    db_url = await fresh_database(database_url, "wh")
    pool = await create_pool(db_url, max_size=10, setup=scope_session)
    async with pool.acquire() as conn:
        await migrate(conn)
    await prepare_read_models(pool)
    auth = nats_server.auth if nats_server is not None else None
    urls = {r: auth.url(nats_server.url, r) for r in SERVICE_ROLES} if auth and nats_server else {}
    stop = asyncio.Event()
    async with FakeLLMServer(instant=True, latency_ms=(300, 800)) as llm:
        provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
        system = make_system()
        config = StackConfig(
            nats_url=nats_url,
            database_url=db_url,
            system=system,
            provider=provider,
            nats_urls=urls,
            services=tuple(r for r in SERVICE_ROLES if r not in ("api", "webhooks")),
        )
        stack = asyncio.create_task(run_stack(config, stop))
        api_bus = await Bus(urls.get("api", nats_url), name="webhooks-api").connect()
        deps = ApiDeps(
            pool=pool, bus=api_bus, system=system, settings=ApiSettings(admin_secret=ADMIN)
        )
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        api = asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, ready.set_result))
        hooks = Hooks(urls.get("webhooks", nats_url), db_url)
        try:
            url = await asyncio.wait_for(asyncio.shield(ready), timeout=20)
            yield System(url=url, llm=llm, hooks=hooks, database_url=db_url)
        finally:
            await hooks.stop()
            stop.set()
            await asyncio.wait_for(asyncio.gather(stack, api), timeout=30)
            await provider.close()
            await api_bus.close()
            await asyncio.wait_for(pool.close(), timeout=10)


@dataclass
class Agency:
    http: httpx.AsyncClient
    llm: FakeLLMServer
    hooks: Hooks
    agency: str
    tenant: str
    key: str

    @property
    def webhooks(self) -> str:
        return f"/agency/{self.agency}/webhooks"

    async def subscribe(self, url: str, events: list[str]) -> dict[str, Any]:
        r = await self.http.post(self.webhooks, json={"url": url, "events": events})
        assert r.status_code == 201, r.text
        created: dict[str, Any] = r.json()
        return created

    async def thread(self, agent_type: str = "worker") -> str:
        r = await self.http.post(f"/agency/{self.agency}/agents", json={"agentType": agent_type})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def invoke(self, thread: str, text: str) -> str:
        body = {"messages": [{"role": "user", "content": text}]}
        r = await self.http.post(f"/agency/{self.agency}/agent/{thread}/invoke", json=body)
        assert r.status_code == 202, r.text
        return str(r.json()["runId"])

    async def deliveries(self, webhook: str) -> list[dict[str, Any]]:
        r = await self.http.get(f"{self.webhooks}/{webhook}/deliveries")
        assert r.status_code == 200, r.text
        found: list[dict[str, Any]] = r.json()["deliveries"]
        return found


@pytest.fixture
async def agency(webhook_system: System) -> AsyncIterator[Agency]:
    """A new tenant's agency, with the webhooks service running (stopped after the test)."""
    key, tenant, agency_id = await new_tenant(webhook_system.url, "webhooks")
    headers = {"Authorization": f"Bearer {key}"}
    hooks = webhook_system.hooks
    if not hooks.running:
        hooks.start()
    async with httpx.AsyncClient(base_url=webhook_system.url, timeout=20, headers=headers) as http:
        yield Agency(
            http=http,
            llm=webhook_system.llm,
            hooks=hooks,
            agency=agency_id,
            tenant=tenant,
            key=key,
        )


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with receiving() as found:
        yield found
