"""MCP servers' tools as agent tools: a real run through the runtime and the tools service,
with the fake model over HTTP, against MCP servers the test starts (streamable HTTP in this
process, stdio as a child process)."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import uvicorn

from agency.contracts.commands import SaveBlueprint
from agency.contracts.events import (
    BlueprintSaved,
    BlueprintSpec,
    McpServer,
    RunCompleted,
    ToolError,
    ToolOutput,
    ToolRequested,
)
from agency.contracts.events.blueprint import BlueprintConfig
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.replay.reexecute import reexecute
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually
from tests.mcp.tool_servers import http_app
from tests.runtime.conftest import running_agents

SECRET = "s3cret-mcp-key"
SERVER_SCRIPT = Path(__file__).with_name("tool_servers.py")


class McpHttpServer:
    """The test MCP server over streamable HTTP on a free port, stoppable mid-test."""

    def __init__(self, port: int = 0) -> None:
        self.headers: list[dict[str, str]] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(
            http_app(self.headers), log_level="warning", log_config=None, access_log=False
        )
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))

        async def started() -> None:
            assert self._task is not None and not self._task.done()
            assert self._server.started

        await assert_eventually(started, timeout=10)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await asyncio.wait_for(self._task, timeout=10)
        self._sock.close()


@pytest.fixture
async def calc() -> AsyncIterator[McpHttpServer]:
    server = McpHttpServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def with_agent(name: str, config: BlueprintConfig, tags: tuple[str, ...] = ()) -> BlueprintSpec:
    return BlueprintSpec(name=name, prompt="You calculate.", tags=("default", *tags), config=config)


def payloads(events: list[RecordedEvent], kind: type[Any]) -> list[Any]:
    return [e.payload for e in events if isinstance(e.payload, kind)]


def requests_of(llm: FakeLLMServer, key: str) -> list[dict[str, Any]]:
    return [r for r in llm.requests if key in msgspec.json.encode(r).decode()]


def tool_named(request: dict[str, Any], name: str) -> dict[str, Any]:
    functions = [t["function"] for t in request.get("tools", [])]
    matches = [f for f in functions if f["name"] == name]
    assert matches, f"{name} not offered; offered: {[f['name'] for f in functions]}"
    return matches[0]


def tool_messages(llm: FakeLLMServer, key: str) -> list[str]:
    last = requests_of(llm, key)[-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


async def test_http_mcp_tool_reaches_the_model_and_its_result_comes_back(
    bus: Bus,
    nats_url: str,
    tenant: str,
    llm: FakeLLMServer,
    calc: McpHttpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The schema reaches the model as `calc__add`, the call runs on the server with the
    header resolved from the environment, and the model reads the result."""
    monkeypatch.setenv("AGENCY_TEST_MCP_KEY", SECRET)
    server = McpServer(
        name="calc", url=calc.url, headers={"X-Api-Key": "${ENV:AGENCY_TEST_MCP_KEY}"}
    )
    system = (
        AgentSystem()
        .defaults()
        .add_agent(with_agent("calc", BlueprintConfig(mcp_servers=(server,))))
    )
    key = "mcp-http-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "calc__add", "arguments": {"a": 2, "b": 3}}]),
        ScriptStep(content="2 + 3 = 5"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("calc")
        await agents.invoke(thread, f"add them {key}")
        events = await agents.wait_terminal(thread)

    add = tool_named(requests_of(llm, key)[0], "calc__add")
    assert add["description"] == "Add two integers."
    assert add["parameters"]["properties"]["a"]["type"] == "integer"
    assert add["parameters"]["required"] == ["a", "b"]
    requested = payloads(events, ToolRequested)
    assert [r.mcp.tool for r in requested] == ["add"]
    assert requested[0].mcp.server.headers == {"X-Api-Key": "${ENV:AGENCY_TEST_MCP_KEY}"}
    assert [o.output for o in payloads(events, ToolOutput)] == ["5"]
    assert tool_messages(llm, key) == ["5"]
    assert [c.result for c in payloads(events, RunCompleted)] == ["2 + 3 = 5"]
    # The header reached the server; the secret itself is nowhere in the log.
    assert any(h.get("x-api-key") == SECRET for h in calc.headers)
    assert all(SECRET not in msgspec.json.encode(e.envelope).decode() for e in events)
    # Re-execution requests the same MCP call from the record, without the server.
    await calc.stop()
    report = await reexecute([events], system)
    assert report.same and report.compared > 0, report


async def test_stdio_mcp_server_runs_the_call_and_is_stopped_with_the_services(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, tmp_path: Path
) -> None:
    """A stdio server named by the agent system is started on first use and its process
    is gone once the services stop."""
    pid_file = tmp_path / "pids"
    server = McpServer(
        name="local",
        command=(sys.executable, str(SERVER_SCRIPT)),
        env={"MCP_PID_FILE": str(pid_file)},
    )
    system = (
        AgentSystem()
        .defaults()
        .add_mcp_server(server, ["local-calc"])
        .add_agent(with_agent("local", BlueprintConfig(), tags=("local-calc",)))
    )
    key = "mcp-stdio-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "local__add", "arguments": {"a": 40, "b": 2}}]),
        ScriptStep(content="42"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("local")
        await agents.invoke(thread, f"add {key}")
        events = await agents.wait_terminal(thread)
        pids = [int(line) for line in pid_file.read_text().split()]

    assert "local__add" in [t["function"]["name"] for t in requests_of(llm, key)[0]["tools"]]
    assert [o.output for o in payloads(events, ToolOutput)] == ["42"]
    assert tool_messages(llm, key) == ["42"]
    assert payloads(events, RunCompleted)
    assert pids  # the runtime (to list) and the tools service (to call) each ran one

    async def all_stopped() -> None:
        assert [pid for pid in pids if alive(pid)] == []

    await assert_eventually(all_stopped, timeout=10)


async def test_mcp_tool_error_is_the_calls_tool_error(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, calc: McpHttpServer
) -> None:
    """An `isError` answer is one `tool.error`, not retried, and the model reads it."""
    server = McpServer(name="calc", url=calc.url)
    system = AgentSystem().defaults()
    key = "mcp-error-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "calc__divide", "arguments": {"a": 1, "b": 0}}]),
        ScriptStep(content="cannot"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        # Saved over NATS like a tenant would: an HTTP server with plain headers is allowed.
        await agents.save_blueprint(with_agent("divider", BlueprintConfig(mcp_servers=(server,))))
        thread = await agents.thread("divider")
        await agents.invoke(thread, f"divide {key}")
        events = await agents.wait_terminal(thread)

    errors = payloads(events, ToolError)
    assert [(e.tool_name, e.attempts) for e in errors] == [("calc__divide", 1)]
    assert "cannot divide by zero" in errors[0].error
    assert "'divide' of server 'calc' failed" in errors[0].error
    assert not payloads(events, ToolOutput)
    assert tool_messages(llm, key) == [errors[0].error]
    assert [c.result for c in payloads(events, RunCompleted)] == ["cannot"]


async def test_a_slow_mcp_tool_times_out_under_the_calls_limit_and_is_retried(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, calc: McpHttpServer
) -> None:
    """The server's `timeout` bounds each attempt; the usual attempts, then one error."""
    server = McpServer(name="calc", url=calc.url, timeout=0.5)
    system = (
        AgentSystem()
        .defaults()
        .add_agent(with_agent("calc", BlueprintConfig(mcp_servers=(server,))))
    )
    key = "mcp-slow-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "calc__wait", "arguments": {"seconds": 30}}]),
        ScriptStep(content="too slow"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("calc")
        await agents.invoke(thread, f"wait {key}")
        events = await agents.wait_terminal(thread, timeout=30)

    errors = payloads(events, ToolError)
    assert [(e.tool_name, e.attempts) for e in errors] == [("calc__wait", 3)]
    assert "timed out after 0.5 s (gave up after 3 attempts)" in errors[0].error
    assert [c.result for c in payloads(events, RunCompleted)] == ["too slow"]


async def test_unreachable_server_is_a_clear_tool_error_and_the_run_ends(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    """A server that went away after its tools were listed answers the call with an error
    naming it; a server never reachable offers no tools; both runs end."""
    gone = McpHttpServer()
    await gone.start()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        never_url = f"http://127.0.0.1:{closed.getsockname()[1]}/mcp"
    servers = (McpServer(name="flaky", url=gone.url), McpServer(name="never", url=never_url))
    system = (
        AgentSystem().defaults().add_agent(with_agent("calc", BlueprintConfig(mcp_servers=servers)))
    )
    key = "mcp-gone-" + tenant
    llm.script(key, [
        ScriptStep(content="listed"),
        ScriptStep(tool_calls=[{"name": "flaky__add", "arguments": {"a": 1, "b": 1}}]),
        ScriptStep(content="the server is down"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("calc")
        await agents.invoke(thread, f"first {key}")
        await agents.wait_terminal(thread)
        await gone.stop()
        await agents.invoke(thread, f"second {key}")
        events = await agents.wait_terminal(thread, count=2, timeout=60)

    offered = [t["function"]["name"] for t in requests_of(llm, key)[0]["tools"]]
    assert "flaky__add" in offered
    assert not [name for name in offered if name.startswith("never__")]
    errors = payloads(events, ToolError)
    assert [e.tool_name for e in errors] == ["flaky__add"]
    assert f"MCP server 'flaky' at {gone.url} is unreachable" in errors[0].error
    assert [c.result for c in payloads(events, RunCompleted)] == ["listed", "the server is down"]


async def test_a_restarted_server_gets_a_new_session_and_the_call_runs(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    """The server forgot the session: the call is sent again on a new one, not failed."""
    first = McpHttpServer()
    await first.start()
    server = McpServer(name="calc", url=first.url)
    system = (
        AgentSystem()
        .defaults()
        .add_agent(with_agent("calc", BlueprintConfig(mcp_servers=(server,))))
    )
    key = "mcp-restart-" + tenant
    add = ScriptStep(tool_calls=[{"name": "calc__add", "arguments": {"a": 1, "b": 2}}])
    llm.script(key, [add, ScriptStep(content="3"), add, ScriptStep(content="3 again")])
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("calc")
        await agents.invoke(thread, f"first {key}")
        await agents.wait_terminal(thread)
        await first.stop()
        second = McpHttpServer(port=first.port)
        await second.start()
        try:
            await agents.invoke(thread, f"second {key}")
            events = await agents.wait_terminal(thread, count=2)
        finally:
            await second.stop()

    assert [o.output for o in payloads(events, ToolOutput)] == ["3", "3"]
    assert not payloads(events, ToolError)
    assert any(h.get("mcp-session-id") is None for h in second.headers)  # a new initialize


async def test_a_tenant_blueprint_may_not_name_a_stdio_server_or_read_the_environment(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    """Saving such a blueprint over NATS is rejected, dead-lettered with the reason."""
    async with running_agents(bus, nats_url, tenant, llm, services=("registry",)) as agents:
        for server in (
            McpServer(name="x", command=("sh", "-c", "id")),
            McpServer(name="x", url="http://127.0.0.1:1/mcp", headers={"A": "${ENV:HOME}"}),
        ):
            spec = with_agent("evil", BlueprintConfig(mcp_servers=(server,)))
            await bus.commands.send(tenant, SaveBlueprint(agency_id=agents.agency, blueprint=spec))

        async def both_rejected() -> list[str]:
            letters = await dead_letters_for(bus, tenant)
            details = [detail for reason, detail, _ in letters if "invalid_blueprint" in reason]
            assert len(details) == 2, letters
            return details

        details = await assert_eventually(both_rejected)
    assert "stdio servers (`command`) are the operator's" in details[0]
    assert "references the environment" in details[1]
    assert not payloads(await bus.store.read(tenant, "agency", agents.agency), BlueprintSaved)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is a stopped process not yet reaped by its parent.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()
