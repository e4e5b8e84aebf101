"""Static breakpoints: `interrupt_before=["tools"]` pauses a run before its tool calls, as
a blueprint's `hitl.tools` does, and a run without input resumes it, through the official
LangGraph SDK client."""

from __future__ import annotations

import httpx
import pytest
from langgraph_sdk.errors import BadRequestError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, call, collect


async def _worker(lg: LangGraph, name: str, answer: str) -> tuple[str, str]:
    """A thread of `worker`, whose blueprint holds no `lookup` call for approval."""
    key = f"lg-{name}-{lg.agency}"
    lg.llm.script(
        key,
        [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content=answer)],
    )
    thread = await lg.client.threads.create(graph_id="worker")
    return str(thread["thread_id"]), key


async def test_interrupt_before_tools_pauses_and_a_run_without_input_resumes(
    lg: LangGraph,
) -> None:
    thread, key = await _worker(lg, "breakpoint", "looked it up")
    paused = await lg.client.runs.wait(thread, "worker", input=ask(key), interrupt_before=["tools"])
    assert isinstance(paused, dict)
    (interrupt,) = paused["__interrupt__"]
    (request,) = interrupt["value"]["action_requests"]
    assert request["name"] == "lookup" and request["args"] == {"word": "w"}
    assert [m["type"] for m in paused["messages"]] == ["human", "ai"]

    assert (await lg.client.threads.get(thread))["status"] == "interrupted"
    state = await lg.client.threads.get_state(thread)
    assert state["next"] == ["tools"] and state["interrupts"] == [interrupt]

    resumed = await lg.client.runs.wait(thread, "worker", input=None)
    assert isinstance(resumed, dict) and "__interrupt__" not in resumed
    assert [m["type"] for m in resumed["messages"]] == ["human", "ai", "tool", "ai"]
    assert resumed["messages"][-1]["content"] == "looked it up"
    assert (await lg.client.threads.get(thread))["status"] == "idle"
    runs = await lg.client.runs.list(thread)
    assert {r["status"] for r in runs} == {"success"}


async def test_a_streamed_breakpoint_of_every_node_resumes_with_a_command(
    lg: LangGraph,
) -> None:
    thread, key = await _worker(lg, "breakpoint-all", "done")
    parts = await collect(
        lg.client.runs.stream(
            thread, "worker", input=ask(key), interrupt_before="*", stream_mode="updates"
        )
    )
    updates = [p.data for p in parts if p.event == "updates"]
    assert "__interrupt__" in updates[-1]
    resumed = await lg.client.runs.wait(thread, "worker", command={"resume": "reject"})
    assert isinstance(resumed, dict)
    assert [m["type"] for m in resumed["messages"]] == ["human", "ai", "tool", "ai"]


async def test_a_run_without_breakpoints_runs_its_tools(lg: LangGraph) -> None:
    thread, key = await _worker(lg, "no-breakpoint", "straight through")
    final = await lg.client.runs.wait(thread, "worker", input=ask(key))
    assert isinstance(final, dict) and "__interrupt__" not in final
    assert final["messages"][-1]["content"] == "straight through"


async def test_breakpoints_that_do_not_map_are_refused(lg: LangGraph) -> None:
    thread, key = await _worker(lg, "breakpoint-refused", "x")
    with pytest.raises(BadRequestError, match=r"'agent'.*'model' and 'tools'"):
        await lg.client.runs.create(thread, "worker", input=ask(key), interrupt_before=["agent"])
    with pytest.raises(BadRequestError, match="interrupt_before 'model'"):
        await lg.client.runs.create(thread, "worker", input=ask(key), interrupt_before=["model"])
    with pytest.raises(BadRequestError, match="interrupt_after"):
        await lg.client.runs.create(thread, "worker", input=ask(key), interrupt_after=["model"])
    assert await lg.client.runs.list(thread) == []


async def test_a_run_without_input_does_not_approve_a_blueprints_hold(lg: LangGraph) -> None:
    key = f"lg-hold-{lg.agency}"
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="ok")]
    )
    thread = str((await lg.client.threads.create(graph_id="approver"))["thread_id"])
    paused = await lg.client.runs.wait(thread, "approver", input=ask(key))
    assert isinstance(paused, dict) and paused["__interrupt__"]
    # `runs.wait` raises httpx's own error (the SDK reads its answer as a stream).
    with pytest.raises(httpx.HTTPStatusError) as held:
        await lg.client.runs.wait(thread, "approver", input=None)
    assert held.value.response.status_code == 409
    assert (await lg.client.threads.get(thread))["status"] == "interrupted"
