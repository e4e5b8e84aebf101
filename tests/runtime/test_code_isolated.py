"""Isolated code agents end to end: real NATS, the runtime services, the fake model over
HTTP, the handler in a bubblewrap worker. Each agent (`tests/runtime/isolated_agents.py`)
is registered isolated and, as a control, not: the sandbox makes the difference."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from agency import AgentContext
from agency.contracts.events import (
    AgentStateSet,
    ChatMessage,
    FileWritten,
    ModelCompleted,
    ReplyAction,
    ReplyDelta,
    RunCompleted,
    RunError,
    ToolError,
    ToolOutput,
    ToolStarted,
)
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.code import CodeAgent
from agency.services.agents.isolation import Isolation, NotIsolatable
from agency.services.agents.system import AgentSystem
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.code_isolated import AGENT_RUNNER
from agency.services.runtime.loop import ThreadDriver
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.runtime.replay.reexecute import reexecute
from agency.services.threads.caches import BlueprintCache, ThreadCache
from tests.helpers import assert_eventually
from tests.runtime import isolated_agents as agents
from tests.runtime.conftest import Agents, make_system, running_agents
from tests.runtime.test_code_agents import payloads, terminals
from tests.runtime.test_code_interrupted import TENANT, THREAD, begun

SECRET = "AGENCY_TEST_SECRET"
PROJECT_FILE = str(Path(__file__).resolve().parents[2] / "pyproject.toml")
STREAMED = ("model.delta", "reply.delta", "checkpoint.saved")


def isolated_system(llm: FakeLLMServer, secret_file: Path) -> AgentSystem:
    port = urlparse(llm.base_url).port
    probe = {"variable": SECRET, "paths": [str(secret_file), PROJECT_FILE], "port": port}
    sandbox = Isolation(env={"VISIBLE": "yes"}, memory_mib=256)
    system = make_system()
    for name, cls, settings in (
        ("echo", agents.Echo, {"greeting": "Hi"}),
        ("keeper", agents.Keeper, {}),
        ("prober", agents.Prober, probe),
    ):
        system.code_agent(name, cls, settings=settings)
        system.code_agent(name + "_isolated", cls, settings=settings, isolation=sandbox)
    return (
        system.code_agent("hog", agents.Hog, isolation=Isolation(memory_mib=160))
        .code_agent("crasher", agents.Crasher, isolation=sandbox)
        .code_agent("sleeper", agents.Sleeper, isolation=sandbox)
        .code_agent("napper", agents.Napper, isolation=Isolation(wall_seconds=2))
        .code_agent("spinner", agents.Spinner, isolation=Isolation(cpu_seconds=1))
    )


@pytest.fixture
def secret_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(SECRET, "s3cret")
    path = tmp_path / "secret.txt"
    path.write_text("the service's secret")
    return path


@pytest.fixture
async def isolated(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, secret_file: Path
) -> AsyncIterator[Agents]:
    system = isolated_system(llm, secret_file)
    async with running_agents(bus, nats_url, tenant, llm, system=system) as running:
        yield running


async def run(agents_: Agents, agent: str, text: str, count: int = 1) -> list[RecordedEvent]:
    thread = await agents_.thread(agent)
    await agents_.invoke(thread, text)
    return await agents_.wait_terminal(thread, count=count, timeout=40)


def shape(events: list[RecordedEvent]) -> list[str]:
    """The event types, streamed text (whose chunking is timing) left out."""
    return [e.type for e in events if e.type not in STREAMED]


def reply_text(events: list[RecordedEvent]) -> str:
    return "".join(d.text for d in payloads(events, ReplyDelta))


async def test_an_isolated_agent_streams_a_reply_as_an_in_process_one(
    isolated: Agents, secret_file: Path
) -> None:
    answer = [ScriptStep(content="a streamed answer", stream_delay_ms=40)]
    isolated.llm.script("iso-echo-in-" + isolated.tenant, answer)
    isolated.llm.script("iso-echo-out-" + isolated.tenant, answer)
    inside = await run(isolated, "echo_isolated", "hello iso-echo-in-" + isolated.tenant)
    outside = await run(isolated, "echo", "hello iso-echo-out-" + isolated.tenant)

    assert terminals(inside) == ["run.completed"], payloads(inside, RunError)
    assert shape(inside) == shape(outside)
    assert reply_text(inside) == reply_text(outside) == "Hi: a streamed answer"
    assert payloads(inside, ModelCompleted)[0].message.content == "a streamed answer"
    assert payloads(inside, RunCompleted)[0].result == "Hi: a streamed answer"
    report = await reexecute([inside], isolated_system(isolated.llm, secret_file))
    assert report.same, report


async def test_an_isolated_agent_calls_tools_and_keeps_its_state(
    isolated: Agents, secret_file: Path
) -> None:
    thread = await isolated.thread("keeper_isolated")
    await isolated.invoke(thread, "first")
    await isolated.wait_terminal(thread, timeout=40)
    await isolated.invoke(thread, "second")
    inside = await isolated.wait_terminal(thread, count=2, timeout=40)
    outside = await run(isolated, "keeper", "first")

    assert terminals(inside) == ["run.completed", "run.completed"], payloads(inside, RunError)
    assert [s.value for s in payloads(inside, AgentStateSet)] == [
        {"count": 1, "last": "first"},
        {"count": 2, "last": "second"},
    ]
    assert [o.tool_name for o in payloads(inside, ToolOutput)] == ["write_file", "write_file"]
    assert [e.tool_name for e in payloads(inside, ToolError)] == ["no_such_tool"] * 2
    result = payloads(inside, RunCompleted)[1].result
    assert result.startswith("count 2 (wrote 1 characters"), result
    assert "unknown tool 'no_such_tool'" in result and result.endswith("state 2)")
    first = [e for e in inside if e.seq <= payloads_seq(inside, RunCompleted)[0]]
    assert shape(first)[1:] == shape(outside)[1:]  # past thread.created, the same
    state = fold(isolated.tenant, thread, inside)
    assert state.agent_state == {"count": 2, "last": "second"}
    assert state.file("count.txt") == "2"
    report = await reexecute([inside], isolated_system(isolated.llm, secret_file))
    assert report.same, report


def payloads_seq(events: list[RecordedEvent], kind: type[Any]) -> list[int]:
    return [e.seq for e in events if isinstance(e.payload, kind)]


async def test_an_isolated_agent_cannot_see_the_service(
    isolated: Agents, secret_file: Path
) -> None:
    inside_events = await run(isolated, "prober_isolated", "probe")
    outside_events = await run(isolated, "prober", "probe")
    inside = json.loads(payloads(inside_events, RunCompleted)[0].result)
    outside = json.loads(payloads(outside_events, RunCompleted)[0].result)

    # In the runtime the agent sees everything the service does ...
    assert outside["variable"] == "s3cret"
    assert outside["files"][str(secret_file)] == "read: the service's secret"
    assert outside["files"][PROJECT_FILE].startswith("read: ")
    assert outside["socket"] == "connected"
    # ... in its sandbox none of it.
    assert inside["variable"] is None
    assert inside["environ"] == ["VISIBLE"]
    assert inside["files"] == {
        str(secret_file): "denied: FileNotFoundError",
        PROJECT_FILE: "denied: FileNotFoundError",
    }
    assert inside["socket"].startswith("denied: "), inside["socket"]


async def test_an_isolated_agent_past_its_memory_limit_ends_with_run_error(
    isolated: Agents,
) -> None:
    events = await run(isolated, "hog", "allocate")
    assert terminals(events) == ["run.error"]
    error = payloads(events, RunError)[0]
    assert error.kind == "internal_error"
    assert error.error == "isolated code agent 'hog' exceeded its memory limit of 160 MiB"
    assert reply_text(events) == "allocating "


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("crash", "isolated code agent 'crasher' ended without a result (exit status 7)"),
        ("garbage", "isolated code agent 'crasher' wrote an unreadable message"),
    ],
)
async def test_an_isolated_agent_whose_worker_breaks_ends_with_run_error(
    isolated: Agents, text: str, reason: str
) -> None:
    events = await run(isolated, "crasher", text)
    assert terminals(events) == ["run.error"]
    assert payloads(events, RunError)[0].error.startswith(reason), payloads(events, RunError)
    assert "model.started" not in [e.type for e in events]


@pytest.mark.parametrize(
    ("agent", "reason", "written"),
    [
        ("napper", "isolated code agent 'napper' exceeded its wall time of 2 s", "napping"),
        ("spinner", "isolated code agent 'spinner' exceeded its CPU time limit of 1 s", "spinning"),
    ],
)
async def test_an_isolated_agent_past_its_time_ends_with_run_error(
    isolated: Agents, agent: str, reason: str, written: str
) -> None:
    events = await run(isolated, agent, "go")
    assert terminals(events) == ["run.error"]
    assert payloads(events, RunError)[0].error == reason
    assert reply_text(events) == written


def workers() -> list[int]:
    """The processes running this project's agent worker."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(AGENT_RUNNER).encode() in cmdline:
                found.append(int(entry.name))
    return found


async def test_a_cancel_kills_the_worker(isolated: Agents) -> None:
    key = "iso-slow-" + isolated.tenant
    words = " ".join(f"word{i}" for i in range(200))
    isolated.llm.script(key, [ScriptStep(content=words, stream_delay_ms=100)])
    thread = await isolated.thread("sleeper")
    await isolated.invoke(thread, key)
    await isolated.wait_for(thread, lambda es: "reply.delta" in [e.type for e in es])
    assert workers()
    await isolated.cancel(thread)
    events = await isolated.wait_terminal(thread)
    assert terminals(events) == ["run.canceled"], payloads(events, RunError)

    async def gone() -> None:
        assert workers() == []

    await assert_eventually(gone)


async def test_an_isolated_run_begun_by_a_dead_drive_is_resumed_against_its_record(
    llm: FakeLLMServer, tmp_path: Path
) -> None:
    store = MemoryEventStore()
    call = "call_1_r1"
    await begun(
        store,
        "keeper_isolated",
        "one",
        ReplyAction(run_id="r1", name="write_file", arguments='{"path": "count.txt"}'),
        ToolStarted(
            run_id="r1",
            tool_call_id=call,
            tool_name="write_file",
            arguments='{"path": "count.txt", "content": "1"}',
        ),
        FileWritten(run_id="r1", path="count.txt", content="1"),
        ToolOutput(run_id="r1", tool_call_id=call, tool_name="write_file", output="recorded"),
    )
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    try:
        system = isolated_system(llm, tmp_path / "secret.txt")
        driver = ThreadDriver(store, system, provider, ThreadCache(store), BlueprintCache(store))
        state = await driver.drive(TENANT, THREAD)
    finally:
        await provider.close()
    run_ = state.run("r1")
    assert run_ is not None and run_.status == "completed", run_
    assert run_.result.startswith("count 1 (recorded; unknown tool"), run_.result
    events = store.events(TENANT, "thread", THREAD)
    assert sum(isinstance(e.envelope.payload, ToolStarted) for e in events) == 1
    assert sum(isinstance(e.envelope.payload, ReplyAction) for e in events) == 1
    assert state.agent_state == {"count": 1, "last": "one"}


class Importable(CodeAgent):
    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        return None


def test_a_class_the_worker_cannot_import_is_refused_at_registration() -> None:
    class Local(CodeAgent):
        async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
            return None

    with pytest.raises(NotIsolatable, match="code agent 'local' cannot be isolated: its class"):
        AgentSystem().code_agent("local", Local, isolation=Isolation())
    AgentSystem().code_agent("local", Local)  # in the runtime it is fine
    AgentSystem().code_agent("top", Importable, isolation=Isolation())
    assert os.path.exists(AGENT_RUNNER)
