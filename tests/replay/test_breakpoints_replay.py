"""A run with static breakpoints before its model calls (`pause_before_model`,
`pause_after_tools`), paused and approved at each, re-executes from its log to the same
events: the runtime decides the pauses from the log alone."""

from __future__ import annotations

from agency.contracts.commands import InvokeThread
from agency.contracts.events import ChatMessage
from agency.contracts.ids import new_id
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.runtime.replay.recorded import split_record
from agency.services.runtime.replay.reexecute import reexecute
from tests.replay.conftest import call
from tests.runtime.conftest import Agents, make_system


def breakpoints(events: list[RecordedEvent]) -> int:
    return sum(e.type == "run.paused" and e.payload.reason == "breakpoint" for e in events)  # type: ignore[attr-defined]


async def test_a_run_paused_before_its_model_calls_re_executes_to_the_same_events(
    agents: Agents,
) -> None:
    key = "reexec-breakpoints-" + agents.tenant
    agents.llm.script(
        key,
        [ScriptStep(tool_calls=(call("lookup", word="w"),)), ScriptStep(content="looked it up")],
    )
    thread = await agents.thread()
    await agents.bus.commands.send(
        agents.tenant,
        InvokeThread(
            agency_id=agents.agency,
            thread_id=thread,
            run_id="run_" + new_id(),
            messages=(ChatMessage(role="user", content=key),),
            pause_before_model=True,
            pause_after_tools=True,
        ),
    )
    # Paused before the first model call, and before the one after the tool step.
    for paused in (1, 2):

        def reached(events: list[RecordedEvent], n: int = paused) -> bool:
            return breakpoints(events) == n

        events = await agents.wait_for(thread, reached)
        assert [e.type for e in events].count("model.completed") == paused - 1
        await agents.approve(thread, approved=True)
    events = await agents.wait_terminal(thread)
    assert "run.completed" in [e.type for e in events] and breakpoints(events) == 2
    assert [e.type for e in events].count("model.completed") == 2

    report = await reexecute([events], make_system())
    assert report.same, report.comparisons
    assert report.comparisons[0].compared == len(
        split_record(agents.tenant, thread, events).produced
    )
