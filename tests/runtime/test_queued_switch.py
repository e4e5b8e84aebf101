"""A request of another blueprint on a busy thread (LangGraph's `enqueue` of another
assistant): accepted, it never joins the active run; when its own run starts, the thread
switches first (`thread.blueprint_switched`, then `run.started` as that blueprint). Pure
decisions over a thread folded from an in-memory log."""

from __future__ import annotations

from agency.contracts.commands import InvokeThread
from agency.contracts.events import (
    BlueprintSwitched,
    ChatMessage,
    RequestAccepted,
    RequestRejected,
    RunPaused,
    RunStarted,
    ThreadCreated,
    ToolCall,
)
from agency.services.runtime import commands
from agency.services.runtime.actions import Append, CallModel
from tests.runtime.test_model_breakpoints import Log

LOOKUP = ToolCall(id="c1", name="lookup", arguments="{}")


def asked(run_id: str, agent_type: str | None = None) -> InvokeThread:
    return InvokeThread(
        agency_id="ag",
        thread_id="th",
        run_id=run_id,
        messages=(ChatMessage(role="user", content=f"hi {run_id}"),),
        agent_type=agent_type,
    )


async def running() -> Log:
    log = Log()
    await log.add(ThreadCreated(agency_id="ag", agent_type="worker"))
    await log.invoke("r1")
    await log.act()
    assert await log.act() == CallModel(run_id="r1", step=1)
    await log.answer(1, LOOKUP)
    return log


async def test_a_queued_request_of_another_blueprint_runs_after_as_it() -> None:
    log = await running()
    (accepted,) = commands.invoke(log.state, asked("r2", "approver"), "k2")
    assert isinstance(accepted, RequestAccepted) and accepted.agent_type == "approver"
    await log.add(accepted)
    # It does not join the worker's run: the worker's next model call goes ahead without it.
    assert await log.act() == CallModel(run_id="r1", step=2)
    assert [m.content for m in log.state.messages if m.role == "user"] == ["hi"]
    await log.answer(2)
    await log.act()  # the worker's run completes
    assert log.state.active_run_id is None and log.state.agent_type == "worker"
    switched = await log.act()
    assert switched == Append(
        (
            BlueprintSwitched(
                run_id="r2",
                from_agent_type="worker",
                to_agent_type="approver",
                reason="a run of this blueprint was queued and starts now",
            ),
        )
    )
    started = await log.act()
    assert isinstance(started, Append) and isinstance(started.events[0], RunStarted)
    assert started.events[0].run_id == "r2" and started.events[0].agent_type == "approver"


async def test_a_request_of_the_same_blueprint_behind_it_waits_its_turn() -> None:
    log = await running()
    for run_id, agent_type in (("r2", "approver"), ("r3", "worker")):
        await log.add(*commands.invoke(log.state, asked(run_id, agent_type), f"k-{run_id}"))
    # r3 is the worker's, but queued behind r2: it joins nothing and waits.
    assert await log.act() == CallModel(run_id="r1", step=2)
    assert [q.run_id for q in log.state.queue] == ["r2", "r3"]


async def test_a_run_out_of_steps_ends_for_a_run_of_another_blueprint() -> None:
    """A run out of steps waits to be continued by its own blueprint; a request of another
    (whatever its strategy) ends it and its run starts at once as that blueprint."""
    log = await running()
    await log.add(RunPaused(run_id="r1", reason="exhausted"))
    (same,) = commands.invoke(log.state, asked("r3", "worker"), "k3")
    assert isinstance(same, RequestAccepted)  # its own blueprint continues it
    decided = commands.invoke(log.state, asked("r2", "approver"), "k2")
    assert not any(isinstance(e, RequestRejected) for e in decided)
    for event in decided:
        await log.add(event)
    ended = log.state.run("r1")
    assert ended is not None and ended.status == "canceled"
    assert ended.reason is not None and "out of steps" in ended.reason
    assert log.state.agent_type == "approver" and log.state.active_run_id is None
    assert [q.run_id for q in log.state.queue] == ["r2"]
