"""Tools the invoking client runs itself (AG-UI's frontend tools): carried on the invoke's
`request.accepted` onto its run, never run by the runtime; a run whose open calls are all
the client's completes with them open, and the next request's tool messages answer them.
Pure functions."""

from __future__ import annotations

from agency.contracts.commands import InvokeThread
from agency.contracts.events import (
    AgentCompleted,
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    ClientTool,
    MessageAppended,
    RequestAccepted,
    RequestInjected,
    RunCompleted,
    RunStarted,
    ThreadCreated,
    ToolCall,
    ToolRequested,
)
from agency.domain.thread_state import ThreadState, fold
from agency.services.agents.tools import define_tool
from agency.services.runtime import commands
from agency.services.runtime.actions import Append, CallModel, Wait, next_action
from agency.services.runtime.replay.memstore import MemoryEventStore

CONFIRM = ClientTool(name="confirm", description="Ask the user", parameters={"type": "object"})
ASK = ToolCall(id="c1", name="confirm", arguments="{}")
SEARCH = ToolCall(id="c2", name="search", arguments="{}")
BLUEPRINT = BlueprintSpec(name="worker", prompt="p")


async def search(args: dict[str, object], ctx: object) -> str:
    """Search."""
    return "found"


TOOLS = {"search": define_tool(search)}


async def folded(*events: AnyEvent) -> ThreadState:
    store, position = MemoryEventStore(), fold("t", "th", []).position
    await store.append("t", "thread", "th", list(events), expected=position)
    return fold("t", "th", await store.read("t", "thread", "th"))


def running(*tools: ClientTool) -> list[AnyEvent]:
    asked = InvokeThread(agency_id="ag", thread_id="th", run_id="r1", client_tools=tools)
    (accepted,) = commands.invoke(fold("t", "th", []), asked, "key-r1")
    return [
        ThreadCreated(agency_id="ag", agent_type="worker"),
        accepted,
        RunStarted(run_id="r1", agent_type="worker", max_steps=5),
        MessageAppended(run_id="r1", message=ChatMessage(role="user", content="go")),
    ]


def answered(*calls: ToolCall) -> AnyEvent:
    return MessageAppended(run_id="r1", message=ChatMessage(role="assistant", tool_calls=calls))


async def test_the_invoke_s_client_tools_are_on_its_acceptance_and_its_run() -> None:
    events = running(CONFIRM)
    assert isinstance(events[1], RequestAccepted) and events[1].client_tools == (CONFIRM,)
    state = await folded(*events)
    run = state.run("r1")
    assert run is not None and run.client_tools == (CONFIRM,) and run.client_tool("confirm")


async def test_a_run_whose_open_calls_are_the_client_s_completes_with_them_open() -> None:
    state = await folded(*running(CONFIRM), answered(ASK))
    action = next_action(state, BLUEPRINT, TOOLS)
    assert isinstance(action, Append)
    assert [type(e) for e in action.events] == [AgentCompleted, RunCompleted]
    assert state.open_tool_calls() == (ASK,)


async def test_the_runtime_s_own_calls_run_first_and_the_client_s_wait() -> None:
    state = await folded(*running(CONFIRM), answered(ASK, SEARCH))
    action = next_action(state, BLUEPRINT, TOOLS)
    assert isinstance(action, Append)
    (requested,) = action.events
    assert isinstance(requested, ToolRequested) and requested.call == SEARCH
    waiting = await folded(*running(CONFIRM), answered(ASK, SEARCH), requested)
    assert isinstance(next_action(waiting, BLUEPRINT, TOOLS), Wait)


async def test_a_call_of_a_tool_no_client_offered_is_an_unknown_tool() -> None:
    state = await folded(*running(), answered(ASK))
    action = next_action(state, BLUEPRINT, TOOLS)
    assert isinstance(action, Append)
    assert "unknown tool 'confirm'" in str(action.events[0])


FINISHED = [
    *running(CONFIRM),
    answered(ASK),
    AgentCompleted(run_id="r1"),
    RunCompleted(run_id="r1"),
]


async def test_the_client_s_answer_in_the_next_request_lets_the_model_go_on() -> None:
    state = await folded(*FINISHED)
    asked = InvokeThread(
        agency_id="ag",
        thread_id="th",
        run_id="r2",
        messages=(ChatMessage(role="tool", content="yes", tool_call_id="c1"),),
    )
    (accepted,) = commands.invoke(state, asked, "key-r2")
    start = next_action(await folded(*FINISHED, accepted), BLUEPRINT, TOOLS)
    assert isinstance(start, Append)
    later = await folded(*FINISHED, accepted, *start.events)
    assert later.open_tool_calls() == ()
    assert isinstance(next_action(later, BLUEPRINT, TOOLS), CallModel)


async def test_a_request_that_joins_the_run_brings_its_client_tools() -> None:
    newer = ClientTool(name="confirm", description="Ask again")
    pick = ClientTool(name="pick")
    asked = InvokeThread(agency_id="ag", thread_id="th", run_id="r2", client_tools=(newer, pick))
    state = await folded(*running(CONFIRM))
    (accepted,) = commands.invoke(state, asked, "key-r2")
    joined = await folded(
        *running(CONFIRM),
        accepted,
        RequestInjected(run_id="r1", request_run_id="r2", idempotency_key="key-r2"),
    )
    run = joined.run("r1")
    assert run is not None and run.client_tools == (newer, pick)
