"""Static breakpoints before model calls (LangGraph's `interrupt_before=["model"]` and
`interrupt_after=["tools"]`): carried on the run's `request.accepted`, decided by
`next_action` from the log, let through by an approval, parked by the watchdog. Pure
functions over a thread folded from an in-memory log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agency.contracts.commands import ApproveToolCalls, InvokeThread
from agency.contracts.errors import CommandRejected
from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    HitlResume,
    MessageAppended,
    RequestAccepted,
    RequestInjected,
    RunPaused,
    RunResumed,
    RunStarted,
    RunTick,
    ThreadCreated,
    ToolCall,
)
from agency.domain.thread_state import ThreadState, fold
from agency.services.runtime import commands, watchdog
from agency.services.runtime.actions import Append, CallModel, Wait, next_action
from agency.services.runtime.replay.memstore import MemoryEventStore

BLUEPRINT = BlueprintSpec(name="worker", prompt="p")
LOOKUP = ToolCall(id="c1", name="lookup", arguments="{}")


class Log:
    """One thread's log in memory: append events, read the thread folded from it."""

    def __init__(self) -> None:
        self.store = MemoryEventStore()
        self.state = fold("t", "th", [])

    async def add(self, *events: AnyEvent) -> ThreadState:
        await self.store.append("t", "thread", "th", list(events), expected=self.state.position)
        self.state = fold("t", "th", await self.store.read("t", "thread", "th"))
        return self.state

    async def invoke(
        self, run_id: str, *, pause_before_model: bool = False, pause_after_tools: bool = False
    ) -> ThreadState:
        asked = InvokeThread(
            agency_id="ag",
            thread_id="th",
            run_id=run_id,
            messages=(ChatMessage(role="user", content="hi"),),
            pause_before_model=pause_before_model,
            pause_after_tools=pause_after_tools,
        )
        return await self.add(*commands.invoke(self.state, asked, f"key-{run_id}"))

    async def act(self) -> Append | CallModel:
        """Apply `next_action`: its events appended; a model call answered by `answer`."""
        action = next_action(self.state, BLUEPRINT, {})
        assert isinstance(action, Append | CallModel), action
        if isinstance(action, Append):
            await self.add(*action.events)
        return action

    async def answer(self, step: int, *calls: ToolCall) -> None:
        message = ChatMessage(role="assistant", content="" if calls else "done", tool_calls=calls)
        await self.add(
            RunTick(run_id="r1", step=step), MessageAppended(run_id="r1", message=message)
        )
        for call in calls:
            result = ChatMessage(role="tool", content="found", tool_call_id=call.id)
            await self.add(MessageAppended(run_id="r1", message=result))


async def started(*, pause_before_model: bool = False, pause_after_tools: bool = False) -> Log:
    log = Log()
    await log.add(ThreadCreated(agency_id="ag", agent_type="worker"))
    await log.invoke(
        "r1", pause_before_model=pause_before_model, pause_after_tools=pause_after_tools
    )
    started = await log.act()
    assert isinstance(started, Append) and isinstance(started.events[0], RunStarted)
    return log


def approve(state: ThreadState, approved: bool = True) -> list[AnyEvent]:
    asked = ApproveToolCalls(agency_id="ag", thread_id="th", approved=approved, run_id="r1")
    return list(commands.approve(state, asked, "approve-key"))


async def test_the_breakpoints_are_on_the_acceptance_and_the_run() -> None:
    log = Log()
    await log.add(ThreadCreated(agency_id="ag", agent_type="worker"))
    state = await log.invoke("r1", pause_before_model=True, pause_after_tools=True)
    accepted = state.run("r1")
    assert accepted is not None and accepted.pause_before_model and accepted.pause_after_tools
    assert not accepted.pause_before_tools
    stored = next(
        e.payload for e in await log.store.read("t", "thread", "th") if e.type == "request.accepted"
    )
    assert isinstance(stored, RequestAccepted)
    assert stored.pause_before_model and stored.pause_after_tools


async def test_before_every_model_call_the_first_included_an_approval_goes_on() -> None:
    log = await started(pause_before_model=True)
    paused = await log.act()
    assert paused == Append((RunPaused(run_id="r1", reason="breakpoint"),))
    run = log.state.run("r1")
    assert run is not None and run.at_breakpoint and log.state.active_run_id == "r1"
    assert next_action(log.state, BLUEPRINT, {}) == Wait()  # nothing until approved

    (resume,) = approve(log.state)
    assert resume == HitlResume(run_id="r1", approved=True)
    await log.add(resume)
    assert await log.act() == Append((RunResumed(run_id="r1"),))
    assert await log.act() == CallModel(run_id="r1", step=1)
    # The model called for a tool: before the next model call, the run pauses again.
    await log.answer(1, LOOKUP)
    assert await log.act() == Append((RunPaused(run_id="r1", reason="breakpoint"),))
    await log.add(*approve(log.state))
    await log.act()
    assert await log.act() == CallModel(run_id="r1", step=2)


async def test_after_tools_pauses_only_where_a_tool_step_ends() -> None:
    log = await started(pause_after_tools=True)
    assert await log.act() == CallModel(run_id="r1", step=1)  # the first call goes ahead
    await log.answer(1, LOOKUP)
    assert await log.act() == Append((RunPaused(run_id="r1", reason="breakpoint"),))
    await log.add(*approve(log.state))
    await log.act()
    assert await log.act() == CallModel(run_id="r1", step=2)
    await log.answer(2)  # a final answer: nothing is next, the run completes
    completed = await log.act()
    assert isinstance(completed, Append)
    assert [type(e).__name__ for e in completed.events] == ["AgentCompleted", "RunCompleted"]


async def test_a_breakpoint_has_nothing_to_reject_and_a_run_without_one_is_not_paused() -> None:
    log = await started(pause_before_model=True)
    await log.act()
    with pytest.raises(CommandRejected, match="approve it to go on, or cancel it"):
        approve(log.state, approved=False)
    plain = await started()
    assert await plain.act() == CallModel(run_id="r1", step=1)
    with pytest.raises(CommandRejected):
        approve(plain.state)


async def test_a_request_with_a_breakpoint_that_joins_the_run_makes_it_pause() -> None:
    log = await started()
    assert await log.act() == CallModel(run_id="r1", step=1)
    await log.answer(1, LOOKUP)
    await log.invoke("r2", pause_before_model=True)
    joined = await log.act()
    assert isinstance(joined, Append) and isinstance(joined.events[0], RequestInjected)
    run = log.state.run("r1")
    assert run is not None and run.pause_before_model
    assert await log.act() == Append((RunPaused(run_id="r1", reason="breakpoint"),))


async def test_the_watchdog_parks_a_run_at_a_breakpoint_until_it_is_approved() -> None:
    log = await started(pause_before_model=True)
    await log.act()
    later = datetime.now(UTC) + timedelta(hours=1)
    settings = watchdog.WatchSettings(stall_after=60, end_after=900)
    assert watchdog.verdict(log.state, "r1", later, False, settings) == watchdog.Parked()
    await log.add(*approve(log.state))
    assert isinstance(watchdog.verdict(log.state, "r1", later, False, settings), watchdog.Resume)
