"""A run's `command` beyond a bare resume, through the SDK: `update` together with
`resume` (files at once, messages after the step's tool results), and `goto` to a node of
the graph (`model` skips the calls a run paused before, `tools` runs them)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.errors import BadRequestError, ConflictError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, call


async def _paused(lg: LangGraph, name: str, answer: str) -> tuple[str, str]:
    """A thread of the `approver` blueprint whose run awaits approval of one call."""
    key = f"lg-{name}-{lg.agency}"
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content=answer)]
    )
    thread = str((await lg.client.threads.create(graph_id="approver"))["thread_id"])
    paused = await lg.client.runs.wait(thread, "approver", input=ask(key))
    assert isinstance(paused, dict) and paused["__interrupt__"]
    return thread, key


def _last_request(lg: LangGraph, key: str) -> list[dict[str, Any]]:
    for body in reversed(lg.llm.requests):
        if key in str(body["messages"]):
            return list(body["messages"])
    raise AssertionError(f"the model was never asked about {key}")


async def test_an_update_with_a_resume_follows_the_tool_results(lg: LangGraph) -> None:
    thread, key = await _paused(lg, "update-resume", "noted the hint")
    update = {"messages": [{"type": "human", "content": "hint: be brief"}], "files": {"a.md": "x"}}
    final = await lg.client.runs.wait(
        thread,
        "approver",
        command={"resume": {"decisions": [{"type": "approve"}]}, "update": update},
    )
    assert isinstance(final, dict)
    messages = final["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "human", "ai"]
    assert messages[3]["content"] == "hint: be brief"
    assert messages[-1]["content"] == "noted the hint"
    assert final["files"]["a.md"] == "x"
    asked = _last_request(lg, key)
    assert [m["role"] for m in asked[-3:]] == ["assistant", "tool", "user"]
    assert asked[-1]["content"] == "hint: be brief"


async def test_an_update_as_key_value_pairs_is_one_update(lg: LangGraph) -> None:
    """LangGraph's `update` as a list of `(key, value)` writes: messages add up, files merge."""
    thread, key = await _paused(lg, "update-pairs", "noted both hints")
    update = [
        ("messages", [{"type": "human", "content": "hint one"}]),
        ("files", {"a.md": "x"}),
        ("messages", {"type": "human", "content": "hint two"}),
        ("files", {"b.md": "y"}),
    ]
    final = await lg.client.runs.wait(
        thread,
        "approver",
        command={"resume": {"decisions": [{"type": "approve"}]}, "update": update},
    )
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"][3:]] == [
        "hint one",
        "hint two",
        "noted both hints",
    ]
    assert final["files"] == {"a.md": "x", "b.md": "y"}
    assert [m["content"] for m in _last_request(lg, key)[-2:]] == ["hint one", "hint two"]


async def test_an_update_as_pairs_without_a_resume_is_the_runs_input(lg: LangGraph) -> None:
    key = f"lg-update-pairs-input-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="answered the pairs")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    with pytest.raises(BadRequestError, match=r"\[key, value\] pairs"):
        await lg.client.runs.create(thread, "worker", command={"update": [["messages"]]})
    with pytest.raises(BadRequestError, match="todos"):
        await lg.client.runs.create(thread, "worker", command={"update": [("todos", [])]})
    update = [("messages", [{"type": "human", "content": key}])]
    final = await lg.client.runs.wait(thread, "worker", command={"update": update})
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"]] == [key, "answered the pairs"]


async def test_an_update_with_a_resume_is_checked_before_anything_is_decided(lg: LangGraph) -> None:
    thread, _ = await _paused(lg, "update-resume-bad", "unused")
    bad = {"todos": []}
    with pytest.raises(BadRequestError, match="todos"):
        await lg.client.runs.create(thread, "approver", command={"resume": True, "update": bad})
    tool = {"messages": [{"type": "tool", "tool_call_id": "c1", "content": "x"}]}
    with pytest.raises(BadRequestError, match="no tool message"):
        await lg.client.runs.create(thread, "approver", command={"resume": True, "update": tool})
    assert (await lg.client.threads.get(thread))["status"] == "interrupted"


async def test_goto_model_skips_the_calls_a_run_paused_before(lg: LangGraph) -> None:
    thread, _ = await _paused(lg, "goto-model", "went on without it")
    final = await lg.client.runs.wait(thread, "approver", command={"goto": "model"})
    assert isinstance(final, dict)
    messages = final["messages"]
    assert [m["type"] for m in messages] == ["human", "ai", "tool", "ai"]
    assert "it was not run" in messages[2]["content"]
    assert messages[-1]["content"] == "went on without it"


async def test_goto_tools_runs_the_calls_a_run_paused_before(lg: LangGraph) -> None:
    thread, _ = await _paused(lg, "goto-tools", "looked it up")
    with pytest.raises(BadRequestError, match="contradict"):
        await lg.client.runs.create(
            thread, "approver", command={"goto": "tools", "resume": "reject"}
        )
    final = await lg.client.runs.wait(thread, "approver", command={"goto": ["tools"]})
    assert isinstance(final, dict)
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    assert final["messages"][-1]["content"] == "looked it up"
    assert (await lg.client.threads.get(thread))["status"] == "idle"


async def test_goto_model_on_an_idle_thread_is_a_run_of_its_update(lg: LangGraph) -> None:
    key = f"lg-goto-idle-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="asked and answered")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    update = {"messages": [{"type": "human", "content": key}]}
    final = await lg.client.runs.wait(thread, "worker", command={"goto": "model", "update": update})
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"]] == [key, "asked and answered"]


async def test_goto_names_a_node_of_the_graph(lg: LangGraph) -> None:
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    with pytest.raises(BadRequestError, match="'model' and 'tools'"):
        await lg.client.runs.create(thread, "worker", command={"goto": "planner"})
    with pytest.raises(BadRequestError, match="not several"):
        await lg.client.runs.create(thread, "worker", command={"goto": ["model", "tools"]})
    with pytest.raises(BadRequestError, match="Send to 'model' does not map"):
        await lg.client.runs.create(
            thread, "worker", command={"goto": {"node": "model", "input": {"messages": []}}}
        )
    with pytest.raises(BadRequestError, match="takes the tool call it runs"):
        await lg.client.runs.create(thread, "worker", command={"goto": {"node": "tools", "arg": 1}})
    with pytest.raises(ConflictError, match="no tool calls"):
        await lg.client.runs.create(thread, "worker", command={"goto": "tools"})
    send = {"node": "tools", "input": {"id": "c1", "name": "lookup", "args": {}}}
    with pytest.raises(ConflictError, match="no tool calls"):
        await lg.client.runs.create(thread, "worker", command={"goto": send})


async def _pending_calls(lg: LangGraph, thread: str) -> list[dict[str, Any]]:
    state = await lg.client.threads.get_state(thread)
    return list(state["values"]["messages"][-1]["tool_calls"])


async def test_a_send_to_tools_of_the_pending_call_runs_it(lg: LangGraph) -> None:
    """LangGraph's `Send("tools", tool_call)`, as LangChain's agent routes a call."""
    thread, _ = await _paused(lg, "send-tools", "sent and looked up")
    [pending] = await _pending_calls(lg, thread)
    with pytest.raises(BadRequestError, match="not one the run paused before"):
        await lg.client.runs.create(
            thread, "approver", command={"goto": {"node": "tools", "input": {"id": "other"}}}
        )
    send = {
        "node": "tools",
        "input": {"id": pending["id"], "name": "lookup", "args": pending["args"]},
    }
    final = await lg.client.runs.wait(thread, "approver", command={"goto": [send]})
    assert isinstance(final, dict)
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    assert "rejected" not in final["messages"][2]["content"]
    assert final["messages"][-1]["content"] == "sent and looked up"


async def test_sends_to_tools_with_other_args_run_the_calls_edited(lg: LangGraph) -> None:
    key = f"lg-send-edit-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="one"), call("lookup", word="two")]),
            ScriptStep(content="both looked up"),
        ],
    )
    thread = str((await lg.client.threads.create(graph_id="approver"))["thread_id"])
    await lg.client.runs.wait(thread, "approver", input=ask(key))
    first, second = await _pending_calls(lg, thread)
    # LangChain's agent sends each call with its context: `{tool_call, state}`.
    sends = [
        {"node": "tools", "input": {"tool_call": {**first, "args": {"word": "edited"}}}},
        {"node": "tools", "input": {"tool_call": second, "state": {}}},
    ]
    with pytest.raises(BadRequestError, match="2 pending tool calls"):
        await lg.client.runs.create(thread, "approver", command={"goto": sends[:1]})
    with pytest.raises(BadRequestError, match="contradict"):
        await lg.client.runs.create(thread, "approver", command={"goto": sends, "resume": "reject"})
    final = await lg.client.runs.wait(thread, "approver", command={"goto": sends})
    assert isinstance(final, dict)
    tools = [m["content"] for m in final["messages"] if m["type"] == "tool"]
    assert len(tools) == 2 and "edited" in tools[0] and "two" in tools[1]
    assert final["messages"][-1]["content"] == "both looked up"
