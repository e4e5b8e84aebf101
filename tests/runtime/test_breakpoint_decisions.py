"""An invoke that pauses before every tool call (LangGraph's `interrupt_before=["tools"]`):
carried on its `request.accepted`, folded onto its run, and the model step's decision to
hold the answer's calls for approval. Pure functions."""

from __future__ import annotations

from agency.contracts.commands import InvokeThread
from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    RequestAccepted,
    RequestInjected,
    RunStarted,
    ThreadCreated,
    ToolCall,
    ToolRequested,
)
from agency.domain.thread_state import ThreadState, fold
from agency.services.agents.tools import define_tool
from agency.services.runtime import commands
from agency.services.runtime.local_tools import local_tool
from agency.services.runtime.model_step import held_calls
from agency.services.runtime.replay.memstore import MemoryEventStore

SEARCH = ToolCall(id="c1", name="search", arguments="{}")
WRITE = ToolCall(id="c2", name="write", arguments="{}")
ANSWER = ChatMessage(role="assistant", tool_calls=(SEARCH, WRITE))


def invoked(run_id: str, pause_before_tools: bool, state: ThreadState | None = None) -> AnyEvent:
    asked = InvokeThread(
        agency_id="ag", thread_id="th", run_id=run_id, pause_before_tools=pause_before_tools
    )
    (accepted,) = commands.invoke(state or fold("t", "th", []), asked, f"key-{run_id}")
    return accepted


async def folded(*appends: list[AnyEvent]) -> ThreadState:
    """The thread after these appends, one after the other, as the log stores them."""
    store, position = MemoryEventStore(), fold("t", "th", []).position
    for events in appends:
        position = (await store.append("t", "thread", "th", events, expected=position)).position
    return fold("t", "th", await store.read("t", "thread", "th"))


def started(pause_before_tools: bool) -> list[AnyEvent]:
    return [
        ThreadCreated(agency_id="ag", agent_type="worker"),
        invoked("r1", pause_before_tools),
        RunStarted(run_id="r1", agent_type="worker", max_steps=5),
    ]


async def thread_running(pause_before_tools: bool) -> ThreadState:
    return await folded(started(pause_before_tools))


async def test_the_invoke_s_pause_is_on_its_acceptance_and_its_run() -> None:
    accepted = invoked("r1", True)
    assert isinstance(accepted, RequestAccepted) and accepted.pause_before_tools
    paused = await thread_running(True)
    assert paused.run("r1").pause_before_tools  # type: ignore[union-attr]
    plain = await thread_running(False)
    assert not plain.run("r1").pause_before_tools  # type: ignore[union-attr]


async def test_every_call_of_a_pausing_run_is_held_else_what_the_middleware_held() -> None:
    paused, plain = await thread_running(True), await thread_running(False)
    assert held_calls(paused, "r1", ANSWER, ()) == (SEARCH, WRITE)
    assert held_calls(paused, "r1", ANSWER, [WRITE]) == (SEARCH, WRITE)
    assert held_calls(plain, "r1", ANSWER, [WRITE]) == (WRITE,)
    assert held_calls(plain, "r1", ANSWER, ()) == ()
    # A final answer holds nothing: the run completes.
    assert held_calls(paused, "r1", ChatMessage(role="assistant", content="done"), ()) == ()


async def test_a_pausing_run_s_calls_never_run_in_the_runtime() -> None:
    def search(args: object, ctx: object) -> str:
        return "found"

    tool = define_tool(search, local=True)
    blueprint = BlueprintSpec(name="worker", prompt="p")
    request = ToolRequested(run_id="r1", step=1, call=SEARCH)
    paused, plain = await thread_running(True), await thread_running(False)
    assert local_tool(tool, request, plain.run("r1"), blueprint) is tool  # type: ignore[arg-type]
    assert local_tool(tool, request, paused.run("r1"), blueprint) is None  # type: ignore[arg-type]


async def test_a_pausing_request_that_joins_the_active_run_makes_it_pause() -> None:
    running = await thread_running(False)
    joined = RequestInjected(run_id="r1", request_run_id="r2", idempotency_key="key-r2")
    state = await folded(started(False), [invoked("r2", True, running), joined])
    assert state.run("r1").pause_before_tools  # type: ignore[union-attr]
    assert state.run("r2").status == "injected"  # type: ignore[union-attr]
    assert held_calls(state, "r1", ANSWER, ()) == (SEARCH, WRITE)
