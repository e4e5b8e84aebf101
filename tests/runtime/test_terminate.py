"""Terminate: a soft shutdown of a thread. Its active run ends canceled (reason
`terminated`, open calls answered), queued requests with it, later invokes are refused,
and a terminated child shows `terminated` in its parent's registry."""

from __future__ import annotations

import pytest

from agency.contracts.commands import InvokeThread, TerminateThread
from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    MessageAppended,
    RequestAccepted,
    RequestRejected,
    RunCanceled,
    RunStarted,
    SubagentCompleted,
    SubagentRequested,
    SubagentSpawned,
    SubagentTerminated,
    ThreadCreated,
    ThreadTerminated,
    ToolCall,
    ToolError,
)
from agency.domain.thread_state import ThreadState, fold
from agency.infra.jetstream.records import Position
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.runtime import commands
from agency.services.runtime.actions import Wait, next_action
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.runtime.spawn import subagent_call
from agency.services.subagents.relay import Relay
from tests.runtime.conftest import Agents, make_system

CALL = ToolCall(id="c1", name="lookup")
TERMINATE = TerminateThread(agency_id="ag", thread_id="th", reason="no longer needed")


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


async def folded(*decisions: list[AnyEvent]) -> ThreadState:
    store, position = MemoryEventStore(), Position()
    for events in decisions:
        position = (await store.append("t", "thread", "th", events, expected=position)).position
    return fold("t", "th", await store.read("t", "thread", "th"))


async def test_terminate_ends_the_run_and_the_queue_and_refuses_what_comes_later() -> None:
    state = await folded(
        [ThreadCreated(agency_id="ag", agent_type="worker")],
        [RequestAccepted(run_id="r1", idempotency_key="k1"),
         RunStarted(run_id="r1", agent_type="worker", max_steps=5),
         MessageAppended(run_id="r1", message=ChatMessage(role="assistant", tool_calls=(CALL,)))],
        [RequestAccepted(run_id="r2", idempotency_key="k2", strategy="after")],
    )  # fmt: skip
    events = commands.terminate(state, TERMINATE, "term-1")
    answer, *ends, marker = events
    assert isinstance(answer, MessageAppended) and answer.message.tool_call_id == "c1"
    assert ends == [RunCanceled(run_id="r1", reason="terminated"),
                    RunCanceled(run_id="r2", reason="terminated")]  # fmt: skip
    assert marker == ThreadTerminated(reason="no longer needed")

    after = await folded(
        [ThreadCreated(agency_id="ag", agent_type="worker")],
        [RequestAccepted(run_id="r1", idempotency_key="k1")],
        [ThreadTerminated(reason="done")],
    )
    assert after.terminated and after.queue == ()
    assert isinstance(next_action(after, BlueprintSpec(name="worker"), {}), Wait)
    assert commands.terminate(after, TERMINATE, "term-2") == ()
    invoke = InvokeThread(agency_id="ag", thread_id="th", run_id="r3")
    (refused,) = commands.invoke(after, invoke, "k3")
    assert isinstance(refused, RequestRejected)
    assert refused.reason == "thread th is terminated (done): it takes no new runs or messages"


async def test_parent_terminates_a_child_mid_step(agents: Agents) -> None:
    key = "terminate-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[call("subagent_create", name="envoy", subagentType="liaison",
                                    message=f"think long {key}-child")]),
        ScriptStep(content="created it"),
        ScriptStep(tool_calls=[call("subagent_terminate", name="envoy", reason="plans changed")]),
        ScriptStep(content="terminated it"),
    ])  # fmt: skip
    # The child's one model step is slow: it is under way when the parent terminates it.
    agents.llm.script(f"{key}-child", [ScriptStep(content="too late", delay_ms=30_000)])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    # The create call is answered at once: the spawn may be recorded after the run ends.
    events = await agents.wait_for(
        parent, lambda es: {"run.completed", "subagent.spawned"} <= {e.type for e in es}
    )
    (child,) = [e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)]
    await agents.wait_for(child, lambda es: "model.started" in [e.type for e in es])

    await agents.invoke(parent, "now stop the envoy")
    events = await agents.wait_for(
        parent, lambda es: "subagent.terminated" in [e.type for e in es], timeout=15
    )
    child_events = await agents.wait_terminal(child, timeout=10)
    (end,) = [e.payload for e in child_events if isinstance(e.payload, RunCanceled)]
    assert end.reason == "terminated"
    assert "model.completed" not in [e.type for e in child_events]  # the call was aborted
    (marker,) = [e.payload for e in child_events if isinstance(e.payload, ThreadTerminated)]
    assert marker.reason == "plans changed"
    # The parent's registry says terminated, whatever else the child's end reported.
    events = await agents.wait_terminal(parent, count=2)
    entry = fold(agents.tenant, parent, events).child(child)
    assert entry is not None and entry.status == "terminated"
    # A later invoke of the child is refused, with the reason.
    refused_run = await agents.invoke(child, "are you there?")
    child_events = await agents.wait_for(
        child, lambda es: any(isinstance(e.payload, RequestRejected) for e in es)
    )
    (refusal,) = [e.payload for e in child_events if isinstance(e.payload, RequestRejected)]
    assert refusal.run_id == refused_run
    assert refusal.reason.startswith(f"thread {child} is terminated (plans changed)")
    assert "run.started" not in [e.type for e in child_events if e.envelope.run_id == refused_run]


async def test_a_terminated_child_is_not_messaged_and_frees_its_instance() -> None:
    manager = make_system().blueprints["manager"]
    spawned = SubagentSpawned(run_id="r1", tool_call_id="c0", child_thread_id="child-1",
                              token="tk", subagent_type="helper", name="scribe", resumable=True)  # fmt: skip
    state = await folded(
        [ThreadCreated(agency_id="ag", agent_type="manager")],
        [RequestAccepted(run_id="r1", idempotency_key="k1"),
         RunStarted(run_id="r1", agent_type="manager", max_steps=5), spawned],
        [SubagentTerminated(child_thread_id="child-1", reason="done")],
    )  # fmt: skip
    run = state.active_run
    assert run is not None and state.child("child-1").terminated  # type: ignore[union-attr]
    message = ToolCall(id="c1", name="subagent_message",
                       arguments='{"reference": "child-1", "message": "more"}')  # fmt: skip
    (error,) = subagent_call(state, run, message, manager)
    assert isinstance(error, ToolError) and error.error == "subagent child-1 (scribe) is terminated"
    again = ToolCall(id="c2", name="subagent_terminate", arguments='{"name": "scribe"}')
    (error,) = subagent_call(state, run, again, manager)
    assert isinstance(error, ToolError) and "terminated already" in error.error
    # helper allows one instance: the terminated one no longer counts.
    create = ToolCall(id="c3", name="subagent_create",
                      arguments='{"name": "second", "subagentType": "helper", "message": "go"}')  # fmt: skip
    (requested,) = subagent_call(state, run, create, manager)
    assert isinstance(requested, SubagentRequested) and requested.name == "second"


async def test_a_run_a_terminated_child_refuses_is_reported_to_its_parent(
    agents: Agents, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: the parent messages a child whose termination its registry does not show
    yet. The child refuses the run; the parent's call gets the refusal, never a hang."""

    async def not_relayed(self: Relay, event: object, reason: str) -> None:
        return None

    monkeypatch.setattr(Relay, "terminated", not_relayed)
    key = "refused-" + agents.tenant
    first = [
        ScriptStep(tool_calls=[call("subagent_create", name="scribe", subagentType="helper",
                                    message=f"note {key}-child")]),
        ScriptStep(content="created"),
    ]  # fmt: skip
    agents.llm.script(key, first)
    agents.llm.script(f"{key}-child", [ScriptStep(content="noted")])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent)
    (child,) = [e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)]
    agents.llm.script(key, [
        *first,
        ScriptStep(tool_calls=[call("subagent_message", reference=child, message="more")]),
        ScriptStep(content="the scribe is gone"),
    ])  # fmt: skip
    await agents.bus.commands.send(
        agents.tenant, TerminateThread(agency_id=agents.agency, thread_id=child, reason="gone")
    )
    await agents.wait_for(child, lambda es: "thread.terminated" in [e.type for e in es])

    await agents.invoke(parent, "message the scribe again")
    events = await agents.wait_terminal(parent, count=2, timeout=30)
    reports = [e.payload for e in events if isinstance(e.payload, SubagentCompleted)]
    assert [r.outcome for r in reports] == ["completed", "error"]
    assert reports[-1].report.startswith(f"thread {child} is terminated (gone)")
    assert [e.type for e in events if e.type.startswith("run.") and e.type != "run.tick"][-1] == (
        "run.completed"
    )
