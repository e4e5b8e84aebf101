"""The pure decisions on approve and cancel: bound to their run, one decision per key."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import msgspec
import pytest

from agency.contracts.commands import (
    ApproveToolCalls,
    CancelRun,
    DelayRun,
    InvokeThread,
    UpdateThreadState,
)
from agency.contracts.events import (
    AnyEvent,
    BlueprintSwitched,
    ChatMessage,
    FileWritten,
    HitlInterrupt,
    HitlResume,
    MessageAppended,
    ParentRef,
    RequestAccepted,
    RequestRejected,
    RunCanceled,
    RunPaused,
    RunStarted,
    StateUpdated,
    ThreadCreated,
    Todo,
    TodosWritten,
    ToolCall,
)
from agency.domain.thread_state import ThreadState, fold
from agency.infra.jetstream.commandbus import CommandRejected
from agency.infra.jetstream.records import Position
from agency.services.runtime import commands
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.tenancy.fairness import ACTIVE_RUN_LIMIT, FairnessLimits

CALL = ToolCall(id="c1", name="lookup")


def started(run_id: str) -> list[AnyEvent]:
    return [
        RequestAccepted(run_id=run_id, idempotency_key=run_id),
        RunStarted(run_id=run_id, agent_type="worker", max_steps=5),
    ]


async def thread_with_run_2_paused() -> ThreadState:
    """Run 1 canceled by a command with key `cancel-1`; run 2 paused for approval."""
    store, position = MemoryEventStore(), Position()
    decisions: list[tuple[list[AnyEvent], str | None]] = [
        ([ThreadCreated(agency_id="ag", agent_type="worker"), *started("r1")], None),
        ([RunCanceled(run_id="r1", reason="once")], "cancel-1"),
        ([*started("r2"),
          MessageAppended(run_id="r2", message=ChatMessage(role="assistant", tool_calls=(CALL,))),
          HitlInterrupt(run_id="r2", proposed_tool_calls=(CALL,)),
          RunPaused(run_id="r2", reason="hitl")], None),
    ]  # fmt: skip
    for events, key in decisions:
        result = await store.append("t", "thread", "th", events, expected=position,
                                    idempotency_key=key)  # fmt: skip
        position = result.position
    return fold("t", "th", await store.read("t", "thread", "th"))


async def test_a_cancel_whose_key_was_decided_cancels_nothing_however_late() -> None:
    state = await thread_with_run_2_paused()
    again = CancelRun(agency_id="ag", thread_id="th", reason="once")
    assert commands.cancel(state, again, "cancel-1") == ()
    fresh = commands.cancel(state, again, "cancel-2")
    assert isinstance(fresh[-1], RunCanceled) and fresh[-1].run_id == "r2"


async def test_a_cancel_bound_to_a_queued_request_withdraws_it_and_leaves_the_active_run() -> None:
    store, position = MemoryEventStore(), Position()

    async def fold_after(*events: AnyEvent) -> ThreadState:
        nonlocal position
        position = (await store.append("t", "thread", "th", events, expected=position)).position
        return fold("t", "th", await store.read("t", "thread", "th"))

    await fold_after(ThreadCreated(agency_id="ag", agent_type="worker"), *started("r1"))
    queued = await fold_after(RequestAccepted(run_id="r2", idempotency_key="r2"))
    assert queued.queued("r2") is not None
    (withdrawn,) = commands.cancel(queued, CancelRun(agency_id="ag", thread_id="th", run_id="r2"))
    assert isinstance(withdrawn, RunCanceled) and withdrawn.run_id == "r2"
    assert withdrawn.reason.startswith(commands.WITHDRAWN)
    after = await fold_after(withdrawn)
    assert after.queue == () and after.active_run is not None
    assert after.active_run.run_id == "r1" and after.active_run.status == "running"
    run = after.run("r2")
    assert run is not None and run.status == "canceled" and not run.started


async def test_commands_bound_to_an_ended_run_do_nothing() -> None:
    state = await thread_with_run_2_paused()
    assert commands.cancel(state, CancelRun(agency_id="ag", thread_id="th", run_id="r1"), "k") == ()
    old = ApproveToolCalls(agency_id="ag", thread_id="th", approved=True, run_id="r1")
    assert commands.approve(state, old, "k") == ()
    current = ApproveToolCalls(agency_id="ag", thread_id="th", approved=True, run_id="r2")
    (resume,) = commands.approve(state, current, "k")
    assert resume.run_id == "r2"  # type: ignore[union-attr]


async def test_an_approval_with_an_update_writes_its_files_and_holds_its_messages() -> None:
    """The files are written before the calls run; the messages wait on the run, and leave
    it as they are appended (after the step's tool results)."""
    state = await thread_with_run_2_paused()
    hint = ChatMessage(role="user", content="be brief")
    approve = ApproveToolCalls(
        agency_id="ag", thread_id="th", approved=True, run_id="r2",
        messages=(hint,), files={"a.md": "x"},
    )  # fmt: skip
    written, resume = commands.approve(state, approve, "k")
    assert written == FileWritten(run_id="r2", path="a.md", content="x", origin="attachment")
    assert isinstance(resume, HitlResume) and resume.messages == (hint,)
    store, position = MemoryEventStore(), Position()

    async def fold_after(*events: AnyEvent) -> ThreadState:
        nonlocal position
        position = (await store.append("t", "thread", "th", events, expected=position)).position
        return fold("t", "th", await store.read("t", "thread", "th"))

    await fold_after(
        ThreadCreated(agency_id="ag", agent_type="worker"),
        *started("r2"),
        MessageAppended(run_id="r2", message=ChatMessage(role="assistant", tool_calls=(CALL,))),
        HitlInterrupt(run_id="r2", proposed_tool_calls=(CALL,)),
        RunPaused(run_id="r2", reason="hitl"),
    )
    held = await fold_after(written, resume)
    assert held.run("r2").held_messages == (hint,)  # type: ignore[union-attr]
    other = await fold_after(MessageAppended(run_id="r2", message=ChatMessage(role="user")))
    assert other.run("r2").held_messages == (hint,)  # type: ignore[union-attr]
    appended = await fold_after(MessageAppended(run_id="r2", message=hint))
    assert appended.run("r2").held_messages == ()  # type: ignore[union-attr]


async def test_a_delayed_run_is_pending_until_its_invoke_and_withdrawn_by_a_cancel() -> None:
    store, position = MemoryEventStore(), Position()

    async def fold_after(*events: AnyEvent) -> ThreadState:
        nonlocal position
        position = (await store.append("t", "thread", "th", events, expected=position)).position
        return fold("t", "th", await store.read("t", "thread", "th"))

    due = datetime(2030, 1, 1, tzinfo=UTC)
    idle = await fold_after(ThreadCreated(agency_id="ag", agent_type="worker"))
    delay = DelayRun(agency_id="ag", thread_id="th", run_id="r1", not_before=due)
    (delayed,) = commands.delay(idle, delay)
    pending = await fold_after(delayed)
    assert [r.run_id for r in pending.delayed()] == ["r1"]
    assert commands.delay(pending, delay) == ()
    invoke = InvokeThread(agency_id="ag", thread_id="th", run_id="r1", not_before=due)
    (accepted,) = commands.invoke(pending, invoke, "k1")
    taken = await fold_after(accepted)
    assert taken.delayed() == () and [r.run_id for r in taken.runs] == ["r1"]

    other = await fold_after(*commands.delay(taken, msgspec.structs.replace(delay, run_id="r2")))
    (withdrawn,) = commands.cancel(other, CancelRun(agency_id="ag", thread_id="th", run_id="r2"))
    assert isinstance(withdrawn, RunCanceled) and withdrawn.reason.startswith(commands.WITHDRAWN)
    canceled = await fold_after(withdrawn)
    late = InvokeThread(agency_id="ag", thread_id="th", run_id="r2", not_before=due)
    assert commands.invoke(canceled, late, "k2") == ()


def test_the_active_run_limit_refuses_a_root_run_but_never_one_inside_an_admitted_tree() -> None:
    limits = FairnessLimits(max_active_runs=2)
    lead = ThreadState(tenant_id="t", thread_id="lead")
    child = replace(
        ThreadState(tenant_id="t", thread_id="child"),
        parent=ParentRef(thread_id="lead", token="tk"),
    )
    invoke = InvokeThread(agency_id="ag", thread_id="lead", run_id="r1")
    [refused] = commands.invoke(lead, invoke, "k1", active_runs=2, limits=limits)
    assert isinstance(refused, RequestRejected) and ACTIVE_RUN_LIMIT in refused.reason
    # The subagent's own run, and a child's report to its parent, are part of the tree.
    mine = InvokeThread(agency_id="ag", thread_id="child", run_id="r2")
    [accepted] = commands.invoke(child, mine, "k2", active_runs=2, limits=limits)
    assert isinstance(accepted, RequestAccepted)
    report = InvokeThread(agency_id="ag", thread_id="lead", run_id="r3", reported_by="child")
    [accepted] = commands.invoke(lead, report, "k3", active_runs=2, limits=limits)
    assert isinstance(accepted, RequestAccepted)


async def test_an_update_of_state_is_decided_once_per_key_and_never_on_a_running_thread() -> None:
    store = MemoryEventStore()
    created = await store.append(
        "t", "thread", "th", [ThreadCreated(agency_id="ag", agent_type="worker")],
        expected=Position(),
    )  # fmt: skip
    state = fold("t", "th", await store.read("t", "thread", "th"))
    update = UpdateThreadState(
        agency_id="ag", thread_id="th", messages=(ChatMessage(role="user", content="hi"),),
        files={"/a.md": "a"},
    )  # fmt: skip
    events = commands.update_state(state, update, "upd-1")
    assert [type(e) for e in events] == [MessageAppended, FileWritten]
    await store.append("t", "thread", "th", list(events), expected=created.position,
                       idempotency_key="upd-1")  # fmt: skip
    state = fold("t", "th", await store.read("t", "thread", "th"))
    assert commands.update_state(state, update, "upd-1") == ()
    paused = await thread_with_run_2_paused()
    with pytest.raises(CommandRejected, match="is active"):
        commands.update_state(paused, update, "upd-2")


def test_an_update_made_as_a_node_says_so_before_its_events() -> None:
    state = fold("t", "th", [])
    update = UpdateThreadState(
        agency_id="ag", thread_id="th", todos=(Todo(content="plan", status="pending"),),
        as_node="tools",
    )  # fmt: skip
    events = commands.update_state(state, update, "upd-1")
    assert events == [StateUpdated(as_node="tools"), TodosWritten(todos=update.todos or ())]


async def test_a_request_for_another_blueprint_switches_the_thread_only_between_runs() -> None:
    busy = await thread_with_run_2_paused()
    asked = InvokeThread(agency_id="ag", thread_id="th", run_id="r3", agent_type="approver")
    # Queued: no switch now; it is its run's to make when it starts (`actions.next_action`).
    (queued,) = commands.invoke(busy, msgspec.structs.replace(asked, strategy="queue"), "k3")
    assert isinstance(queued, RequestAccepted) and queued.agent_type == "approver"
    (refused,) = commands.invoke(busy, msgspec.structs.replace(asked, strategy="reject"), "k3")
    assert isinstance(refused, RequestRejected)
    *canceling, switched, accepted = commands.invoke(
        busy, msgspec.structs.replace(asked, strategy="interrupt"), "k3"
    )
    assert isinstance(canceling[-1], RunCanceled) and canceling[-1].run_id == "r2"
    assert isinstance(switched, BlueprintSwitched)
    assert (switched.from_agent_type, switched.to_agent_type) == ("worker", "approver")
    assert isinstance(accepted, RequestAccepted) and accepted.run_id == "r3"
    same = msgspec.structs.replace(asked, agent_type="worker", strategy="interrupt")
    assert not any(isinstance(e, BlueprintSwitched) for e in commands.invoke(busy, same, "k4"))
