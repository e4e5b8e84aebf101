"""Static breakpoints: `interrupt_before=["tools"]` (and `interrupt_after=["model"]`) pause
a run before its tool calls, as a blueprint's `hitl.tools` does; `interrupt_before=["model"]`
before every model call, `interrupt_after=["tools"]` before each that follows a tool step;
a run without input resumes each, through the official LangGraph SDK client."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk.errors import BadRequestError

from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, call, collect, until_status


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


async def test_a_streamed_breakpoint_before_every_node_resumes_with_commands(
    lg: LangGraph,
) -> None:
    thread, key = await _worker(lg, "breakpoint-all", "done")
    parts = await collect(
        lg.client.runs.stream(
            thread, "worker", input=ask(key), interrupt_before="*", stream_mode="updates"
        )
    )
    # Before the model's first call: LangGraph's static interrupt, with no value.
    assert [p.data for p in parts if p.event == "updates"] == [{"__interrupt__": []}]
    # A resume value goes nowhere there: the run goes on, to the pause before its tools.
    held = await lg.client.runs.wait(thread, "worker", command={"resume": "approve"})
    assert isinstance(held, dict) and held["__interrupt__"]
    rejected = await lg.client.runs.wait(thread, "worker", command={"resume": "reject"})
    assert isinstance(rejected, dict) and "__interrupt__" not in rejected
    assert [m["type"] for m in rejected["messages"]] == ["human", "ai", "tool"]
    resumed = await lg.client.runs.wait(thread, "worker", input=None)
    assert isinstance(resumed, dict)
    assert [m["type"] for m in resumed["messages"]] == ["human", "ai", "tool", "ai"]


async def test_a_run_without_breakpoints_runs_its_tools(lg: LangGraph) -> None:
    thread, key = await _worker(lg, "no-breakpoint", "straight through")
    final = await lg.client.runs.wait(thread, "worker", input=ask(key))
    assert isinstance(final, dict) and "__interrupt__" not in final
    assert final["messages"][-1]["content"] == "straight through"


async def test_breakpoints_at_nodes_the_graph_does_not_have_are_refused(lg: LangGraph) -> None:
    thread, key = await _worker(lg, "breakpoint-refused", "x")
    with pytest.raises(BadRequestError, match=r"interrupt_before 'agent'.*'model' and 'tools'"):
        await lg.client.runs.create(thread, "worker", input=ask(key), interrupt_before=["agent"])
    with pytest.raises(BadRequestError, match=r"interrupt_after 'action'.*'model' and 'tools'"):
        await lg.client.runs.create(
            thread, "worker", input=ask(key), interrupt_after=["model", "action"]
        )
    assert await lg.client.runs.list(thread) == []


async def _state(lg: LangGraph, thread: str) -> tuple[str, list[str], list[str]]:
    """The thread's status, the nodes next, and the names of its pending tasks."""
    status = (await lg.client.threads.get(thread))["status"]
    state = await lg.client.threads.get_state(thread)
    return status, list(state["next"]), [t["name"] for t in state["tasks"]]


async def test_interrupt_before_model_pauses_before_every_model_call(lg: LangGraph) -> None:
    thread, key = await _worker(lg, "before-model", "looked it up")
    first = await lg.client.runs.wait(thread, "worker", input=ask(key), interrupt_before=["model"])
    # Paused before the first model call: the input is in, nothing asked of the model yet,
    # and, as LangGraph at a static breakpoint, no interrupt value.
    assert isinstance(first, dict) and "__interrupt__" not in first
    assert [m["type"] for m in first["messages"]] == ["human"]
    assert await _state(lg, thread) == ("interrupted", ["model"], ["model"])
    assert (await lg.client.threads.get_state(thread))["interrupts"] == []

    second = await lg.client.runs.wait(thread, "worker", input=None)
    assert isinstance(second, dict) and "__interrupt__" not in second
    # The model called the tool, the tool ran (no breakpoint before tools), and the run
    # paused again before the next model call.
    assert [m["type"] for m in second["messages"]] == ["human", "ai", "tool"]
    assert await _state(lg, thread) == ("interrupted", ["model"], ["model"])

    final = await lg.client.runs.wait(thread, "worker", input=None)
    assert isinstance(final, dict)
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    assert final["messages"][-1]["content"] == "looked it up"
    assert await _state(lg, thread) == ("idle", [], [])

    runs = await lg.client.runs.list(thread)
    (started,) = [r for r in runs if "~" not in r["run_id"]]
    assert len(runs) == 3 and {r["status"] for r in runs} == {"success"}
    assert all(r["run_id"].startswith(started["run_id"]) for r in runs)
    history = await lg.client.threads.get_history(thread, limit=50)
    assert [h["next"] for h in history if h["next"]] == [["model"], ["model"]]
    latest: dict[str, Any] = dict(history[0]["values"])  # type: ignore[arg-type]
    assert history[0]["next"] == [] and latest["messages"][-1]["type"] == "ai"


async def test_interrupt_after_tools_with_a_slow_model(lg: LangGraph) -> None:
    key = f"lg-after-tools-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(
                tool_calls=(ScriptToolCall(name="lookup", arguments={"word": "w"}),),
                delay_ms=1500,
            ),
            ScriptStep(content="slowly done", delay_ms=800),
        ],
    )
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    run = await lg.client.runs.create(thread, "worker", input=ask(key), interrupt_after=["tools"])
    # The first model call is not paused for: the run is busy with it.
    await until_status(lg.client, thread, run["run_id"], {"running"})
    assert (await lg.client.threads.get(thread))["status"] == "busy"
    paused = await lg.client.runs.join(thread, run["run_id"])
    assert isinstance(paused, dict) and "__interrupt__" not in paused
    assert [m["type"] for m in paused["messages"]] == ["human", "ai", "tool"]
    assert await _state(lg, thread) == ("interrupted", ["model"], ["model"])
    assert (await lg.client.runs.get(thread, run["run_id"]))["status"] == "success"

    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=None, stream_mode="updates")
    )
    updates = [p.data for p in parts if p.event == "updates"]
    assert updates[-1]["model"]["messages"][0]["content"] == "slowly done"
    assert await _state(lg, thread) == ("idle", [], [])
    runs = await lg.client.runs.list(thread)
    assert len(runs) == 2 and {r["status"] for r in runs} == {"success"}


async def test_interrupt_after_model_pauses_before_tools_and_a_final_answer_completes(
    lg: LangGraph,
) -> None:
    thread, key = await _worker(lg, "after-model", "answered")
    parts = await collect(
        lg.client.runs.stream(
            thread, "worker", input=ask(key), interrupt_after=["model"], stream_mode="updates"
        )
    )
    updates = [p.data for p in parts if p.event == "updates"]
    (interrupt,) = updates[-1]["__interrupt__"]
    assert [r["name"] for r in interrupt["value"]["action_requests"]] == ["lookup"]
    assert await _state(lg, thread) == ("interrupted", ["tools"], ["tools"])

    final = await lg.client.runs.wait(thread, "worker", input=None)
    # After the final answer nothing is next: the run completed.
    assert isinstance(final, dict) and "__interrupt__" not in final
    assert final["messages"][-1]["content"] == "answered"
    assert await _state(lg, thread) == ("idle", [], [])


async def test_every_node_streams_each_pause_as_langgraph_does(lg: LangGraph) -> None:
    thread, key = await _worker(lg, "every-node", "all stops")
    pauses: list[list[str]] = []
    asked: dict[str, Any] | None = ask(key)
    for _ in range(6):
        parts = await collect(
            lg.client.runs.stream(
                thread,
                "worker",
                input=asked,
                interrupt_before="*",
                interrupt_after="*",
                stream_mode="updates",
            )
        )
        asked = None
        status, after, _ = await _state(lg, thread)
        if status == "idle":
            break
        last = [p.data for p in parts if p.event == "updates"][-1]
        assert "__interrupt__" in last
        pauses.append(after)
    # Before the first model call, before the tools, before the model call after them.
    assert pauses == [["model"], ["tools"], ["model"]]
    values: dict[str, Any] = dict((await lg.client.threads.get_state(thread))["values"])  # type: ignore[arg-type]
    assert values["messages"][-1]["content"] == "all stops"


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


async def test_new_input_at_a_breakpoint_cancels_the_paused_run_and_runs(
    lg: LangGraph, bus: Bus
) -> None:
    key = f"lg-breakpoint-new-input-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="answered the new input")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    paused = await lg.client.runs.create(
        thread, "worker", input=ask("first"), interrupt_before=["model"]
    )
    await until_status(lg.client, thread, paused["run_id"], {"success"})
    assert (await lg.client.threads.get(thread))["status"] == "interrupted"
    final = await lg.client.runs.wait(thread, "worker", input=ask(key))
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "answered the new input"
    # The paused run's LangGraph run ended at its pause; the new one ran after it.
    runs = await lg.client.runs.list(thread)
    assert [r["status"] for r in runs] == ["success", "success"]
    assert runs[-1]["run_id"] == paused["run_id"]
    assert [m["content"] for m in final["messages"]] == ["first", key, "answered the new input"]
    assert await _state(lg, thread) == ("idle", [], [])
    canceled = [
        e.payload.run_id  # type: ignore[attr-defined]
        for e in await bus.store.read(lg.tenant, "thread", thread)
        if e.type == "run.canceled"
    ]
    assert canceled == [paused["run_id"]]
