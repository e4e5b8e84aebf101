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


async def thread_running(pause_before_tools: bool) -> ThreadState:
    empty = fold("t", "th", [])
    asked = InvokeThread(
        agency_id="ag", thread_id="th", run_id="r1", pause_before_tools=pause_before_tools
    )
    events: list[AnyEvent] = [
        ThreadCreated(agency_id="ag", agent_type="worker"),
        *commands.invoke(empty, asked, "k1"),
        RunStarted(run_id="r1", agent_type="worker", max_steps=5),
    ]
    store = MemoryEventStore()
    await store.append("t", "thread", "th", events, expected=empty.position)
    return fold("t", "th", await store.read("t", "thread", "th"))


async def test_the_invoke_s_pause_is_on_its_acceptance_and_its_run() -> None:
    (accepted,) = commands.invoke(
        fold("t", "th", []),
        InvokeThread(agency_id="ag", thread_id="th", run_id="r1", pause_before_tools=True),
        "k1",
    )
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
