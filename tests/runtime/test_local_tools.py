"""Tools declared local run in the runtime worker: no `tool.requested`, no trip through the
tools service, the same `tool.started` / `tool.output` / `tool.error` in the log."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agency.contracts.events import (
    BlueprintSpec,
    ChatMessage,
    MessageAppended,
    RequestAccepted,
    RunCompleted,
    ThreadCreated,
    ToolError,
    ToolOutput,
    ToolRequested,
)
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.agents.isolation import Isolation
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, define_tool
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.local_tools import is_own_result
from agency.services.runtime.loop import ThreadDriver
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.threads.caches import BlueprintCache, ThreadCache
from tests.runtime.conftest import Agents, running_agents
from tests.runtime.local_apps import DEFINE_CALLS, build, define
from tests.runtime.test_loop import assert_gapless, terminals, types


@pytest.fixture
async def agents(bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer) -> AsyncIterator[Agents]:
    async with running_agents(bus, nats_url, tenant, llm, system=build()) as running:
        yield running


@pytest.fixture
async def without_tools_service(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> AsyncIterator[Agents]:
    services = ("registry", "runtime")
    async with running_agents(bus, nats_url, tenant, llm, services=services, system=build()) as a:
        yield a


def outputs(events: list[RecordedEvent]) -> dict[str, str]:
    return {
        e.payload.tool_name: e.payload.output for e in events if isinstance(e.payload, ToolOutput)
    }


def errors(events: list[RecordedEvent]) -> dict[str, str]:
    return {
        e.payload.tool_name: e.payload.error for e in events if isinstance(e.payload, ToolError)
    }


async def test_a_local_tool_runs_without_the_tools_service(without_tools_service: Agents) -> None:
    agents = without_tools_service
    key = "local-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "define", "arguments": {"word": "agent"}}]),
        ScriptStep(content="An agent acts."),
    ])  # fmt: skip
    thread = await agents.thread("quick")
    await agents.invoke(thread, f"define {key}")
    events = await agents.wait_terminal(thread)

    assert_gapless(events)
    assert terminals(events) == ["run.completed"]
    assert outputs(events) == {"define": "meaning of agent"}
    assert "tool.requested" not in types(events)
    assert {"word": "agent", "thread": thread} in DEFINE_CALLS
    # Started, result and the tool message go out with the next model call, in one append.
    started = types(events).index("tool.started")
    assert types(events)[started : started + 4] == [
        "tool.started", "tool.output", "message.appended", "run.tick",
    ]  # fmt: skip
    assert len({e.stream_seq - e.seq for e in events[started : started + 4]}) == 1
    roles = [e.payload.message.role for e in events if isinstance(e.payload, MessageAppended)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_local_tool_that_raises_or_times_out_answers_with_an_error(
    without_tools_service: Agents,
) -> None:
    agents = without_tools_service
    key = "local-fail-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[
            {"name": "explode", "arguments": {"word": "agent"}},
            {"name": "dawdle", "arguments": {"word": "agent"}},
        ]),
        ScriptStep(content="Neither worked."),
    ])  # fmt: skip
    thread = await agents.thread("quick")
    await agents.invoke(thread, f"try {key}")
    events = await agents.wait_terminal(thread)

    assert terminals(events) == ["run.completed"]
    failed = errors(events)
    assert failed["explode"] == "ValueError: no such word: agent"
    # The tools service's words for a tool allowed one attempt.
    assert failed["dawdle"] == (
        "TimeoutError: tool 'dawdle' timed out after 0.2 s (gave up after 1 attempts)"
    )
    answers = {
        e.payload.message.name: e.payload.message.content
        for e in events
        if isinstance(e.payload, MessageAppended) and e.payload.message.role == "tool"
    }
    assert answers == failed  # what the model read
    assert "tool.requested" not in types(events)


async def test_local_and_external_calls_of_one_turn_both_answer(agents: Agents) -> None:
    key = "local-mixed-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[
            {"name": "lookup", "arguments": {"word": "agent"}},
            {"name": "define", "arguments": {"word": "agent"}},
        ]),
        ScriptStep(content="Both answered."),
    ])  # fmt: skip
    thread = await agents.thread("quick")
    await agents.invoke(thread, f"both {key}")
    events = await agents.wait_terminal(thread)

    assert_gapless(events)
    assert terminals(events) == ["run.completed"]
    assert outputs(events) == {"lookup": "definition of agent", "define": "meaning of agent"}
    requested = [e.payload.call.name for e in events if isinstance(e.payload, ToolRequested)]
    assert requested == ["lookup"]  # only the external call leaves the runtime
    assert types(events).count("model.started") == 2
    # The runtime's own result wakes no drive; the tools service's does.
    own = {e.payload.tool_name: is_own_result(e) for e in events if e.type == "tool.output"}
    assert own == {"define": True, "lookup": False}


async def test_a_call_awaiting_approval_goes_to_the_tools_service(agents: Agents) -> None:
    key = "local-hitl-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "define", "arguments": {"word": "approved"}}]),
        ScriptStep(content="Defined."),
    ])  # fmt: skip
    thread = await agents.thread("quick_approver")
    await agents.invoke(thread, f"define {key}")
    await agents.wait_for(thread, lambda es: "run.paused" in types(es))
    await agents.approve(thread, True)
    events = await agents.wait_terminal(thread)

    assert terminals(events) == ["run.completed"]
    assert outputs(events) == {"define": "meaning of approved"}
    requested = [e.payload.call.name for e in events if isinstance(e.payload, ToolRequested)]
    assert requested == ["define"]


async def test_a_code_agent_runs_local_tools_in_the_runtime(without_tools_service: Agents) -> None:
    agents = without_tools_service
    thread = await agents.thread("definer")
    await agents.invoke(thread, "agent")
    events = await agents.wait_terminal(thread)

    assert terminals(events) == ["run.completed"]
    completed = next(e.payload for e in events if isinstance(e.payload, RunCompleted))
    assert completed.result == "meaning of agent; ValueError: no such word: agent"
    assert outputs(events) == {"define": "meaning of agent"}
    assert errors(events) == {"explode": "ValueError: no such word: agent"}
    assert "tool.requested" not in types(events)


class WorkerDied(BaseException):
    """Stands for the worker's process ending while a local tool runs."""


async def test_a_worker_gone_mid_call_leaves_the_call_open_and_the_next_drive_runs_it(
    llm: FakeLLMServer,
) -> None:
    calls: list[str] = []

    async def fragile(args: dict[str, Any], ctx: ToolContext) -> str:
        calls.append(ctx.call_id)
        if len(calls) == 1:
            raise WorkerDied
        return "meaning of agent"

    system = (
        AgentSystem()
        .add_tool(define_tool(fragile, local=True), ["local"])
        .add_agent(BlueprintSpec(name="fragile", tags=("local",)))
    )
    key = "local-crash-" + new_id()
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "fragile", "arguments": {}}]),
        ScriptStep(content="Defined after all."),
    ])  # fmt: skip
    store = MemoryEventStore()
    position = await store.last_position("t1", "thread", "th1")
    await store.append(
        "t1",
        "thread",
        "th1",
        [
            ThreadCreated(agency_id="a1", agent_type="fragile"),
            RequestAccepted(
                run_id="r1",
                idempotency_key="k1",
                messages=(ChatMessage(role="user", content=key),),
            ),
        ],
        expected=position,
        context=EventContext(agency_id="a1", thread_id="th1"),
    )
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")

    def driver() -> ThreadDriver:
        return ThreadDriver(store, system, provider, ThreadCache(store), BlueprintCache(store))

    try:
        with pytest.raises(WorkerDied):
            await driver().drive("t1", "th1")
        kept = [e.type for e in store.events("t1", "thread", "th1")]
        # Nothing of the call, nor of the answer that asked for it, was appended (the
        # step's opening may have been: it waits a moment for an answer to go with it).
        assert "model.completed" not in kept and not any(t.startswith("tool.") for t in kept)
        state = await driver().drive("t1", "th1")
    finally:
        await provider.close()
    assert state.run("r1").status == "completed"  # type: ignore[union-attr]
    assert len(calls) == 2 and calls[0] == calls[1]  # the same call, run again
    events = store.events("t1", "thread", "th1")
    assert outputs(events) == {"fragile": "meaning of agent"}
    assert [e.type for e in events].count("tool.started") == 1


def test_a_tool_is_either_local_or_isolated() -> None:
    tool = define_tool(define, local=True)
    with pytest.raises(ValueError, match="declared local"):
        AgentSystem().add_tool(tool, ["local"], isolation=Isolation())
