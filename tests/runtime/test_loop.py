"""The agent loop end to end: real NATS, real services, the fake model over HTTP."""

from __future__ import annotations

import asyncio

from agency.contracts.events import (
    HitlInterrupt,
    MessageAppended,
    RequestInjected,
    RunCompleted,
    RunPaused,
    RunResumed,
    ToolCall,
    ToolOutput,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.tenancy.fairness import TenantLoad
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents


def types(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events]


def assert_gapless(events: list[RecordedEvent]) -> None:
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def terminals(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events if e.type in RUN_TERMINAL_TYPES]


async def test_run_with_state_and_external_tools_completes(agents: Agents) -> None:
    key = "script-" + agents.tenant
    agents.llm.script(
        key,
        [
            ScriptStep(tool_calls=[{"name": "write_todos", "arguments": {"todos": [{"content": "look up", "status": "in_progress"}]}}]),
            ScriptStep(tool_calls=[
                {"name": "lookup", "arguments": {"word": "agent"}},
                {"name": "write_file", "arguments": {"path": "notes.md", "content": "# notes"}},
            ]),
            ScriptStep(content="All done."),
        ],
    )  # fmt: skip
    thread = await agents.thread()
    await agents.invoke(thread, f"please work {key}")
    events = await agents.wait_terminal(thread)

    assert_gapless(events)
    assert terminals(events) == ["run.completed"]
    completed = next(e.payload for e in events if isinstance(e.payload, RunCompleted))
    assert completed.result == "All done."
    outputs = {
        e.payload.tool_name: e.payload.output for e in events if isinstance(e.payload, ToolOutput)
    }
    assert outputs["lookup"] == "definition of agent"
    assert "notes.md" in outputs["write_file"]
    assert types(events).count("tool.requested") == 1  # only the external tool leaves the runtime
    assert "todos.written" in types(events) and "file.written" in types(events)
    roles = [e.payload.message.role for e in events if isinstance(e.payload, MessageAppended)]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]


async def test_same_idempotency_key_starts_one_run(agents: Agents) -> None:
    agents.llm.script("idem-" + agents.tenant, [ScriptStep(content="hello")])
    thread = await agents.thread()
    await agents.invoke(thread, "idem-" + agents.tenant, key="k1")
    await agents.invoke(thread, "idem-" + agents.tenant, key="k1")
    events = await agents.wait_terminal(thread)
    await agents.invoke(thread, "idem-" + agents.tenant, key="k1")
    again = await agents.wait_for(thread, lambda es: len(es) >= len(events))
    assert types(again).count("request.accepted") == 1
    assert terminals(again) == ["run.completed"]


async def test_second_invoke_is_queued_and_runs_after_the_first(agents: Agents) -> None:
    key = "queue-" + agents.tenant
    agents.llm.script(
        key, [ScriptStep(content="first answer", delay_ms=300), ScriptStep(content="second answer")]
    )
    thread = await agents.thread()
    first = await agents.invoke(thread, key)
    second = await agents.invoke(thread, key)
    events = await agents.wait_terminal(thread, count=2)
    assert_gapless(events)
    started = [e.payload.run_id for e in events if e.type == "run.started"]  # type: ignore[attr-defined]
    completed = [e.payload.run_id for e in events if e.type == "run.completed"]  # type: ignore[attr-defined]
    assert started == [first, second] and completed == [first, second]
    # The second run started only after the first completed.
    seq = {(e.type, getattr(e.payload, "run_id", None)): e.seq for e in events}
    assert seq[("run.started", second)] > seq[("run.completed", first)]


async def test_reject_strategy_refuses_while_a_run_is_active(agents: Agents) -> None:
    key = "reject-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="slow", delay_ms=500)])
    thread = await agents.thread()
    await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "run.started" in types(es))
    await agents.invoke(thread, key, strategy="reject")
    events = await agents.wait_for(
        thread, lambda es: {"request.rejected", "run.completed"} <= set(types(es))
    )
    assert "request.rejected" in types(events)
    assert terminals(events) == ["run.completed"]


async def test_hitl_approve_runs_the_call(agents: Agents) -> None:
    key = "hitl-ok-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "approved"}}]),
        ScriptStep(content="finished"),
    ])  # fmt: skip
    thread = await agents.thread("approver")
    await agents.invoke(thread, key)
    paused = await agents.wait_for(thread, lambda es: "run.paused" in types(es))
    assert "tool.requested" not in types(paused)
    await agents.approve(thread, approved=True)
    events = await agents.wait_terminal(thread)
    outputs = [e.payload.output for e in events if isinstance(e.payload, ToolOutput)]
    assert outputs == ["definition of approved"]
    assert terminals(events) == ["run.completed"]
    assert_gapless(events)


async def test_hitl_modified_call_runs_with_the_new_arguments(agents: Agents) -> None:
    key = "hitl-mod-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "original"}}]),
        ScriptStep(content="finished"),
    ])  # fmt: skip
    thread = await agents.thread("approver")
    await agents.invoke(thread, key)
    paused = await agents.wait_for(thread, lambda es: "run.paused" in types(es))
    proposed = next(e.payload for e in paused if isinstance(e.payload, HitlInterrupt))
    call = proposed.proposed_tool_calls[0]
    await agents.approve(
        thread,
        approved=True,
        modified=(ToolCall(id=call.id, name="lookup", arguments='{"word": "edited"}'),),
    )
    events = await agents.wait_terminal(thread)
    outputs = [e.payload.output for e in events if isinstance(e.payload, ToolOutput)]
    assert outputs == ["definition of edited"]


async def test_hitl_reject_answers_the_call_without_running_it(agents: Agents) -> None:
    key = "hitl-no-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "never"}}]),
        ScriptStep(content="understood"),
    ])  # fmt: skip
    thread = await agents.thread("approver")
    await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "run.paused" in types(es))
    await agents.approve(thread, approved=False)
    events = await agents.wait_terminal(thread)
    assert "tool.requested" not in types(events)
    tool_messages = [
        e.payload.message for e in events
        if isinstance(e.payload, MessageAppended) and e.payload.message.role == "tool"
    ]  # fmt: skip
    assert len(tool_messages) == 1 and "rejected" in tool_messages[0].content
    assert terminals(events) == ["run.completed"]


async def test_cancel_mid_model_call_stops_the_run(agents: Agents) -> None:
    key = "cancel-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(content="never seen", delay_ms=3000),
        ScriptStep(content="also never"),
    ])  # fmt: skip
    thread = await agents.thread()
    await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "model.started" in types(es))
    await agents.cancel(thread)
    events = await agents.wait_terminal(thread)
    assert terminals(events) == ["run.canceled"]
    canceled_at = next(e.seq for e in events if e.type == "run.canceled")
    # Past the scripted delay, the aborted call must still not have reached the log.
    await asyncio.sleep(3.5)
    later = await agents.events(thread)
    assert not [e for e in later if e.seq > canceled_at and e.type.startswith(("model.", "tool."))]
    assert "model.completed" not in types(later)
    assert_gapless(later)


async def test_step_limit_pauses_the_run_and_a_new_invoke_continues_it(agents: Agents) -> None:
    key = "loop-" + agents.tenant
    ls = ScriptStep(tool_calls=[{"name": "ls", "arguments": {}}])
    agents.llm.script(key, [*[ls] * 8, ScriptStep(content="finished after all")])
    thread = await agents.thread()
    run = await agents.invoke(thread, key)
    paused = await agents.wait_for(thread, lambda es: "run.paused" in types(es))
    pause = next(e.payload for e in paused if isinstance(e.payload, RunPaused))
    assert (pause.run_id, pause.reason) == (run, "exhausted")
    assert types(paused).count("model.completed") == 8  # the worker blueprint's maxSteps
    assert terminals(paused) == []

    more = await agents.invoke(thread, f"go on {key}")
    events = await agents.wait_terminal(thread)
    assert_gapless(events)
    ends = [(e.type, e.payload.run_id) for e in events if e.type in RUN_TERMINAL_TYPES]  # type: ignore[attr-defined]
    assert ends == [("run.completed", run)]  # the same run went on; no second run started
    assert types(events).count("run.started") == 1
    injected = next(e.payload for e in events if isinstance(e.payload, RequestInjected))
    assert (injected.run_id, injected.request_run_id) == (run, more)
    resumed = next(e.payload for e in events if isinstance(e.payload, RunResumed))
    assert resumed.max_steps == 16  # another blueprint's worth of steps
    after = [e for e in events if e.seq > pause_seq(events)]
    assert [e.type for e in after[:5]] == [
        "checkpoint.saved",  # in the pause's own append
        "request.accepted",
        "request.injected",
        "message.appended",
        "run.resumed",
    ]
    assert types(events).count("model.completed") == 9


def pause_seq(events: list[RecordedEvent]) -> int:
    return next(e.seq for e in events if e.type == "run.paused")


async def test_a_message_queued_while_the_run_executes_joins_it_before_the_next_step(
    agents: Agents,
) -> None:
    key = "inject-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "ls", "arguments": {}}], delay_ms=1500),
        ScriptStep(content="answered both"),
    ])  # fmt: skip
    thread = await agents.thread()
    load = TenantLoad()
    async with load.watching(agents.bus.nc):
        first = await agents.invoke(thread, key)
        await agents.wait_for(thread, lambda es: "model.started" in types(es))
        second = await agents.invoke(thread, f"also this {key}")
        events = await agents.wait_terminal(thread)

        async def no_admitted_runs_left() -> None:
            # The joined request's own run ends with its injection: fairness does not
            # count it as an active run of the tenant for ever.
            assert load.active(agents.tenant) == 0

        await assert_eventually(no_admitted_runs_left)
    assert_gapless(events)
    ends = [(e.type, e.payload.run_id) for e in events if e.type in RUN_TERMINAL_TYPES]  # type: ignore[attr-defined]
    assert ends == [("run.completed", first)]
    seq = {e.type: e.seq for e in reversed(events)}  # first occurrence of each type
    injected = next(e for e in events if isinstance(e.payload, RequestInjected))
    assert injected.payload.request_run_id == second  # type: ignore[attr-defined]
    model_calls = [e.seq for e in events if e.type == "model.started"]
    assert seq["model.completed"] < injected.seq < model_calls[1], types(events)
    joined = events[injected.seq]  # the request's message, right after, in the first run
    assert isinstance(joined.payload, MessageAppended)
    assert joined.payload.run_id == first
    assert joined.payload.message.content == f"also this {key}"
    # The second model call saw the injected message, after the first call's tool result.
    last = [r for r in agents.llm.requests if key in str(r["messages"])][-1]
    assert [m["role"] for m in last["messages"]][-2:] == ["tool", "user"]
    assert last["messages"][-1]["content"] == f"also this {key}"


async def test_an_after_request_waits_for_its_own_run(agents: Agents) -> None:
    key = "after-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "ls", "arguments": {}}], delay_ms=1000),
        ScriptStep(content="first done"),
        ScriptStep(content="second done"),
    ])  # fmt: skip
    thread = await agents.thread()
    first = await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "model.started" in types(es))
    second = await agents.invoke(thread, f"later {key}", strategy="after")
    events = await agents.wait_terminal(thread, count=2)
    ends = [(e.type, e.payload.run_id) for e in events if e.type in RUN_TERMINAL_TYPES]  # type: ignore[attr-defined]
    assert ends == [("run.completed", first), ("run.completed", second)]
    assert "request.injected" not in types(events)


async def test_interrupt_strategy_cancels_the_active_run_and_starts_the_new_one(
    agents: Agents,
) -> None:
    key = "interrupt-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="slow first", delay_ms=4000)])
    agents.llm.script("urgent-" + key, [ScriptStep(content="urgent answer")])
    thread = await agents.thread()
    first = await agents.invoke(thread, key)
    await agents.wait_for(thread, lambda es: "model.started" in types(es))
    second = await agents.invoke(thread, "urgent-" + key, strategy="interrupt")
    events = await agents.wait_terminal(thread, count=2)
    ends = [(e.type, e.payload.run_id) for e in events if e.type in RUN_TERMINAL_TYPES]  # type: ignore[attr-defined]
    assert ends == [("run.canceled", first), ("run.completed", second)]
    assert_gapless(events)


async def test_garbage_on_a_threads_subject_does_not_stop_the_thread(agents: Agents) -> None:
    """A message that is no event is passed over (and dead-lettered by consumers); the
    thread keeps working and nothing stored is lost."""
    key = "poison-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="still working")])
    thread = await agents.thread()
    subject = f"tenant.{agents.tenant}.evt.thread.{thread}"
    await agents.bus.js.publish(subject, b"{not an event")
    await agents.invoke(thread, key)
    events = await agents.wait_terminal(thread)
    assert terminals(events) == ["run.completed"]
    assert events[0].type == "thread.created"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
