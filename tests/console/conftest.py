"""The console in a real browser: Debian's chromium driven by Playwright, against the whole
system in the test process (every service, the API, real NATS and PostgreSQL, the fake
model over HTTP).

Re-execution (in the runtime) is given an agent system one change newer than the one the
runs are recorded with (the `worker` blueprint also holds `write_file` for approval), as
if the code had changed since: re-execution in the console then has a real divergence to
show. The API is given the newer system too.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from playwright.async_api import Browser, ConsoleMessage, Page

from agency.contracts.events.blueprint import HitlConfig
from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import provision
from agency.infra.launch import NatsServer
from agency.projections.setup import prepare_read_models
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, define_tool
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig
from tests.api.code_agents import TUNER, TUNER_SETTINGS, Tuner
from tests.browser import chromium
from tests.helpers import created_tenant, fresh_database, pipe
from tests.runtime.conftest import make_system
from tests.serving import serving

ADMIN = "admin-" + secrets.token_urlsafe(12)
# The documentation's screenshots are rewritten only when asked (`just screenshots` sets
# AGENCY_SCREENSHOTS=1); otherwise they are taken into a temporary directory, so a test run
# leaves the working tree as it found it.
DOC_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "console"
SHOTS = (
    DOC_SHOTS
    if os.environ.get("AGENCY_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / f"agency-console-shots-{os.getpid()}"
)


def divide(args: dict[str, Any], ctx: ToolContext) -> float:
    """Divide `a` by `b`."""
    return float(args["a"]) / args["b"]


def console_system() -> AgentSystem:
    """The runtime tests' system, a tool that raises on a zero `b` for the worker, and a
    code agent with a settings schema."""
    return (
        make_system()
        .add_tool(define_tool(divide), ["lookup"])
        .code_agent(TUNER, Tuner, settings=TUNER_SETTINGS)
    )


def newer_system() -> AgentSystem:
    """The test system with one change: a worker's file writes wait for approval."""
    system = console_system()
    worker = system.blueprints["worker"]
    hitl = HitlConfig(tools=("lookup_guarded", "write_file"))
    config = msgspec.structs.replace(worker.config, hitl=hitl)
    return system.add_agent(msgspec.structs.replace(worker, config=config))


@pytest.fixture(scope="package")
async def nats_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """A NATS of this package's own: the thousands of events its scale tests write stay
    out of the stream that other packages' projectors read from the start."""
    root = tmp_path_factory.mktemp("console") / "nats"
    async with NatsServer(root, sync_interval="default") as server:
        yield server.url


@pytest.fixture(scope="package")
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    async with Bus(nats_url, name="console-tests") as connected:
        await provision(connected.js)
        yield connected


@dataclass
class Stack:
    url: str
    llm: FakeLLMServer
    bus: Bus


@pytest.fixture(scope="package")
async def stack(nats_url: str, database_url: str, bus: Bus) -> AsyncIterator[Stack]:
    db_url = await fresh_database(database_url, "c")
    pool = await create_pool(db_url, max_size=10)
    async with pool.acquire() as conn:
        await migrate(conn)
    await prepare_read_models(pool)
    async with FakeLLMServer(instant=True) as llm:
        provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
        api_bus = await Bus(nats_url, name="console-api").connect()
        deps = ApiDeps(
            pool=pool, bus=api_bus, system=newer_system(), settings=ApiSettings(admin_secret=ADMIN)
        )
        config = StackConfig(
            nats_url=nats_url,
            database_url=db_url,
            system=console_system(),
            provider=provider,
            reexecution_system=newer_system(),
        )
        try:
            async with serving(deps, config) as url:
                yield Stack(url=url, llm=llm, bus=bus)
        finally:
            await provider.close()
            await api_bus.close()
            await asyncio.wait_for(pool.close(), timeout=10)


@dataclass(frozen=True)
class Tenant:
    id: str
    key: str

    def http(self, stack: Stack) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.AsyncClient(base_url=stack.url, timeout=20, headers=headers)

    async def new_thread(self, stack: Stack, agency: str, agent_type: str = "worker") -> str:
        """A new thread of `agent_type` in `agency`, made over the API; its id."""
        async with self.http(stack) as http:
            r = await http.post(f"/agency/{agency}/agents", json={"agentType": agent_type})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])


@pytest.fixture
async def tenant(stack: Stack) -> Tenant:
    async with httpx.AsyncClient(base_url=stack.url, timeout=20) as admin:
        key, tenant_id, _ = await created_tenant(admin, ADMIN, "console")
        return Tenant(id=tenant_id, key=key)


@pytest.fixture(scope="package")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as opened:
        yield opened


@pytest.fixture
async def page(browser: Browser, stack: Stack, tenant: Tenant) -> AsyncIterator[Page]:
    """A signed-in page; the test fails on any script error or failed asset."""
    context = await browser.new_context(viewport={"width": 1440, "height": 880})
    tab = await context.new_page()
    tab.set_default_timeout(15_000)
    problems: list[str] = []
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console error: {message.text}")

    tab.on("console", on_console)
    await tab.goto(f"{stack.url}/#key={tenant.key}")
    try:
        yield tab
    finally:
        await context.close()
    # Refused API calls the test makes on purpose answer 4xx: the console shows them.
    unexpected = [p for p in problems if "status of 4" not in p]
    if id(tab) in NETWORK_ERRORS_EXPECTED:
        NETWORK_ERRORS_EXPECTED.discard(id(tab))
        unexpected = [p for p in unexpected if "net::ERR_" not in p]
    assert not unexpected, unexpected


class CuttableProxy:
    """A TCP proxy in front of the API whose open connections a test can cut, as a network
    failure would (EventSource then reconnects by itself, sending Last-Event-ID)."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self._target = (host, int(port))
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    def cut(self) -> int:
        """Close every open connection; returns how many there were."""
        writers, self._writers = self._writers, set()
        for writer in writers:
            writer.transport.abort()
        return len(writers)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}


# Pages whose test expects failed requests (it cuts connections on purpose).
NETWORK_ERRORS_EXPECTED: set[int] = set()


async def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"))
