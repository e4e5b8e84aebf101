"""The `tasks`, `checkpoints` and `debug` stream modes through the SDK: a task starts and
ends once per node's work, each checkpoint is one `get_history` lists with the state there,
and `debug` carries both."""

from __future__ import annotations

from collections import Counter
from typing import Any

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, call, collect


async def test_tasks_checkpoints_and_debug_follow_the_run(lg: LangGraph) -> None:
    key = "lg-debug-modes-" + lg.agency
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="w")], delay_ms=300),
            ScriptStep(content="looked up", delay_ms=300),
        ],
    )
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    modes = ["tasks", "checkpoints", "debug", "values"]
    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode=modes)  # type: ignore[arg-type]
    )
    by_mode: dict[str, list[Any]] = {}
    for part in parts:
        by_mode.setdefault(part.event, []).append(part.data)

    tasks = by_mode["tasks"]
    starts = [t for t in tasks if "triggers" in t]
    results = [t for t in tasks if "result" in t]
    assert [t["name"] for t in starts] == ["model", "tools", "model"]
    assert [t["name"] for t in results] == ["model", "tools", "model"]
    # Each task ends once, after it started, with what it wrote.
    assert Counter(t["id"] for t in starts) == Counter(t["id"] for t in results)
    for start, result in zip(starts, results, strict=True):
        assert tasks.index(start) < tasks.index(result)
    assert results[0]["result"]["messages"][0]["tool_calls"][0]["name"] == "lookup"
    assert results[1]["result"]["messages"][0]["type"] == "tool"
    assert results[-1]["result"]["messages"][0]["content"] == "looked up"
    assert all(r["error"] is None and r["interrupts"] == [] for r in results)

    # Every checkpoint streamed is one the history lists, with the same values.
    history = await lg.client.threads.get_history(thread, limit=100)
    listed = {h["checkpoint"]["checkpoint_id"]: h["values"] for h in history}
    checkpoints = by_mode["checkpoints"]
    assert len(checkpoints) >= 4  # the question, the call, its result, the answer
    for checkpoint in checkpoints:
        checkpoint_id = checkpoint["config"]["configurable"]["checkpoint_id"]
        assert checkpoint["values"] == listed[checkpoint_id]
        assert checkpoint["config"]["configurable"]["thread_id"] == thread
    state = await lg.client.threads.get_state(thread)
    assert checkpoints[-1]["values"] == state["values"] and checkpoints[-1]["next"] == []

    # `debug` wraps the same tasks and checkpoints, in order.
    debug = by_mode["debug"]
    assert Counter(d["type"] for d in debug) == {
        "task": len(starts),
        "task_result": len(results),
        "checkpoint": len(checkpoints),
    }
    assert [d["payload"] for d in debug if d["type"] == "checkpoint"] == checkpoints
    assert [d["payload"] for d in debug if d["type"] != "checkpoint"] == tasks
    assert all(isinstance(d["timestamp"], str) and d["step"] >= 0 for d in debug)


async def test_an_approval_is_the_tools_task_interrupt(lg: LangGraph) -> None:
    key = "lg-debug-interrupt-" + lg.agency
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="done")]
    )
    thread = str((await lg.client.threads.create(graph_id="approver"))["thread_id"])
    parts = await collect(
        lg.client.runs.stream(thread, "approver", input=ask(key), stream_mode="tasks")
    )
    interrupted = [p.data for p in parts if p.event == "tasks" and p.data.get("interrupts")]
    assert len(interrupted) == 1 and interrupted[0]["name"] == "tools"
    state = await lg.client.threads.get_state(thread)
    assert interrupted[0]["interrupts"][0]["id"] == state["interrupts"][0]["id"]
