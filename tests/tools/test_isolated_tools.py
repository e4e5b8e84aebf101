"""Isolated tools run by the tools service against a real NATS: what the sandbox hides and
refuses, the limits it enforces, and the answers the model reads when a worker fails.

The tools are `tests/tools/sandboxed.py`'s; a control registers the same function without
isolation, so each test shows the sandbox, not the tool, makes the difference.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agency.contracts.events import ToolError, ToolOutput
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.services.agents.isolation import Isolation
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolFn, define_tool
from agency.services.sandbox.host import RUNNER
from agency.services.tools import ToolsService
from tests.helpers import assert_eventually
from tests.tools import sandboxed
from tests.tools.test_tools_service import append, canceled_run, requested, result_of

Start = Callable[[AgentSystem], Awaitable[None]]
Call = Callable[..., Awaitable[ToolOutput | ToolError]]
PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def start(bus: Bus) -> AsyncIterator[Start]:
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def start(system: AgentSystem) -> None:
        service = ToolsService(bus, system, tool_backoff=(0.01,), poll_interval=0.1)
        tasks.append(asyncio.create_task(service.run(stop)))

    yield start
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


@pytest.fixture
def call(bus: Bus, tenant: str) -> Call:
    """Request a call of `tool` with `args` in a new thread; its one result."""

    async def call(tool: str, **args: Any) -> ToolOutput | ToolError:
        thread, call_id = new_id(), new_id()
        await append(bus, tenant, thread, requested(call_id, tool, json.dumps(args)))
        return await assert_eventually(lambda: result_of(bus, tenant, thread, call_id), timeout=30)

    return call


class Listener:
    """A TCP server on localhost that greets whoever connects."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0

    async def greet(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.write(b"hello")
        await writer.drain()
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    listener = Listener()
    server = await asyncio.start_server(listener.greet, "127.0.0.1", 0)
    listener.port = server.sockets[0].getsockname()[1]
    async with server:
        yield listener


def isolated(fn: ToolFn, isolation: Isolation | None = None, **options: Any) -> AgentSystem:
    """A system with `fn` isolated, and as `open_<name>` without isolation (the control)."""
    name = fn.__name__
    return (
        AgentSystem()
        .add_tool(define_tool(fn, **options), ["t"], isolation=isolation or Isolation())
        .add_tool(define_tool(fn, name=f"open_{name}", **options), ["t"])
    )


def output(result: ToolOutput | ToolError) -> str:
    assert isinstance(result, ToolOutput), result
    return result.output


async def test_an_isolated_tool_sees_only_the_environment_the_operator_gives_it(
    start: Start, call: Call, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_TEST_SECRET", "s3cret-of-the-service")
    await start(isolated(sandboxed.read_env, Isolation(env={"GREETING": "hi"})))

    seen = json.loads(output(await call("read_env", name="AGENCY_TEST_SECRET")))
    assert seen == {"value": None, "environ": {"GREETING": "hi"}}
    control = json.loads(output(await call("open_read_env", name="AGENCY_TEST_SECRET")))
    assert control["value"] == "s3cret-of-the-service"


async def test_an_isolated_tool_cannot_read_the_services_files(
    start: Start, call: Call, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the service's secret")
    data = tmp_path / "data"
    data.mkdir()
    (data / "variables.key").write_text("the data directory's key")
    await start(isolated(sandboxed.read_file))

    for path in (secret, data / "variables.key", PROJECT / "pyproject.toml"):
        result = output(await call("read_file", path=str(path)))
        assert result.startswith("denied: FileNotFoundError"), (path, result)
        assert output(await call("open_read_file", path=str(path))).startswith("read: ")


async def test_an_isolated_tool_cannot_open_a_socket(
    start: Start, call: Call, listener: Listener
) -> None:
    await start(isolated(sandboxed.connect))

    assert output(await call("connect", port=listener.port)).startswith("denied: ")
    assert listener.connections == 0
    assert output(await call("open_connect", port=listener.port)) == "connected: hello"


async def test_an_isolated_tool_the_operator_lets_on_the_network_connects(
    start: Start, call: Call, listener: Listener
) -> None:
    await start(isolated(sandboxed.connect, Isolation(network=True)))

    assert output(await call("connect", port=listener.port)) == "connected: hello"
    assert listener.connections == 1


async def test_an_isolated_tool_writes_in_its_scratch_directory(start: Start, call: Call) -> None:
    await start(isolated(sandboxed.scratch))

    written = json.loads(output(await call("scratch", text="draft")))
    assert written == {"cwd": "/scratch", "note": "draft", "tmp": "DRAFT"}


async def test_a_memory_hog_is_stopped_at_its_memory_limit(start: Start, call: Call) -> None:
    await start(isolated(sandboxed.hog, Isolation(memory_mib=128)))

    result = await call("hog", mib=512)
    assert isinstance(result, ToolError)
    assert result.error == "isolated tool 'hog' exceeded its memory limit of 128 MiB"
    assert result.attempts == 1
    assert output(await call("hog", mib=16)) == "16"


async def test_a_cpu_spinner_is_stopped_at_its_cpu_limit(start: Start, call: Call) -> None:
    await start(isolated(sandboxed.spin, Isolation(cpu_seconds=1), timeout=60))

    result = await call("spin")
    assert isinstance(result, ToolError)
    assert result.error == "isolated tool 'spin' exceeded its CPU time limit of 1 s"
    assert result.attempts == 1


async def test_a_worker_past_its_timeout_is_killed(start: Start, call: Call) -> None:
    await start(isolated(sandboxed.sleep, timeout=0.5, max_attempts=1))

    result = await call("sleep", seconds=120)
    assert isinstance(result, ToolError)
    assert result.error == (
        "TimeoutError: tool 'sleep' timed out after 0.5 s (gave up after 1 attempts)"
    )

    async def no_worker_left() -> None:
        assert not _workers(), _workers()

    await assert_eventually(no_worker_left)


async def test_a_worker_whose_run_is_canceled_is_killed_and_never_answers(
    bus: Bus, tenant: str, start: Start
) -> None:
    await start(isolated(sandboxed.sleep, timeout=60))
    thread = new_id()
    await append(bus, tenant, thread, requested("c1", "sleep", '{"seconds": 120}'))

    async def worker_running() -> None:
        assert _workers()

    await assert_eventually(worker_running, timeout=30)
    await append(bus, tenant, thread, *canceled_run("c1", answered=True))

    async def no_worker_left() -> None:
        assert not _workers(), _workers()

    await assert_eventually(no_worker_left, timeout=10)
    types = [e.type for e in await bus.store.read(tenant, "thread", thread)]
    assert "tool.output" not in types and "tool.error" not in types


async def test_an_isolated_tools_answers_and_failures_reach_the_model(
    start: Start, call: Call
) -> None:
    system = (
        isolated(sandboxed.chatty)
        .add_tool(define_tool(sandboxed.refuse), ["t"], isolation=Isolation())
        .add_tool(define_tool(sandboxed.async_echo), ["t"], isolation=Isolation())
    )
    await start(system)

    answer = json.loads(output(await call("chatty")))
    assert set(answer) == {"call", "thread", "attempt"} and answer["attempt"] == 1
    assert output(await call("async_echo", text="héllo")) == "héllo"
    failed = await call("refuse", how="tool_failed")
    assert isinstance(failed, ToolError) and failed.error == "no such city"
    with capture_logs() as logs:
        raised = await call("refuse", how="raise")
    assert isinstance(raised, ToolError) and raised.error == "ValueError: bad input"
    # Where in the tool it raised, as the worker saw it; its traceback in the service's log.
    source, first = inspect.getsourcelines(sandboxed.refuse)
    line = first + next(i for i, text in enumerate(source) if "ValueError" in text)
    assert raised.raised_at.endswith(f"tests/tools/sandboxed.py, line {line}, in refuse")
    (logged,) = [e for e in logs if e["event"] == "tool raised" and e["tool"] == "refuse"]
    assert logged["raised_at"] == raised.raised_at
    assert logged["traceback"].endswith('raise ValueError("bad input")\nValueError: bad input\n')


async def test_without_bwrap_an_isolated_tool_fails_and_never_runs_unsandboxed(
    start: Start, call: Call, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no bwrap on it
    monkeypatch.setenv("AGENCY_TEST_SECRET", "s3cret-of-the-service")
    await start(isolated(sandboxed.read_env))

    result = await call("read_env", name="AGENCY_TEST_SECRET")
    assert isinstance(result, ToolError)
    assert result.error == (
        "isolated tool 'read_env' cannot run: bubblewrap (bwrap) is not installed where the "
        "tools service runs, and an isolated tool never runs without its sandbox"
    )


def _workers() -> list[str]:
    """Command lines of this checkout's sandboxed workers still running."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(RUNNER) in text:
            found.append(text)
    return found
