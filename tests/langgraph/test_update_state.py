"""`threads.update_state` through the official SDK client: events on the thread's log."""

from __future__ import annotations

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError, ConflictError, NotFoundError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph, new_tenant
from tests.langgraph.helpers import ask, call


async def test_update_state_adds_messages_files_and_todos(lg: LangGraph) -> None:
    key = "lg-update-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="seen it")])
    thread_id = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    done = await lg.client.threads.update_state(
        thread_id,
        {
            "messages": [{"type": "human", "content": "note from a person"}],
            "files": {"/notes.md": "hello"},
            "todos": [{"content": "read notes", "status": "pending"}],
        },
        as_node="model",
    )
    state = await lg.client.threads.get_state(thread_id)
    assert done["checkpoint"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert [m["content"] for m in state["values"]["messages"]] == ["note from a person"]
    assert state["values"]["files"] == {"/notes.md": "hello"}
    assert state["values"]["todos"] == [{"content": "read notes", "status": "pending"}]

    # The next run sees what was added.
    result = await lg.client.runs.wait(thread_id, "worker", input=ask(key))
    assert isinstance(result, dict)
    assert [m["content"] for m in result["messages"]] == ["note from a person", key, "seen it"]
    # At a past checkpoint: the state is set back there, then updated (a branch).
    past = done["checkpoint"]["checkpoint_id"]
    branched = await lg.client.threads.update_state(
        thread_id, {"messages": ["x"]}, checkpoint_id=past
    )
    state = await lg.client.threads.get_state(thread_id)
    assert state["checkpoint"]["checkpoint_id"] == branched["checkpoint"]["checkpoint_id"]
    assert [m["content"] for m in state["values"]["messages"]] == ["note from a person", "x"]
    assert state["values"]["files"] == {"/notes.md": "hello"}
    assert state["values"]["todos"] == [{"content": "read notes", "status": "pending"}]
    parent = state["parent_checkpoint"]["checkpoint_id"]
    restored = await lg.client.threads.get_state(thread_id, checkpoint_id=parent)
    assert restored["parent_checkpoint"]["checkpoint_id"] == past
    with pytest.raises(NotFoundError, match="no checkpoint"):
        await lg.client.threads.update_state(thread_id, {"messages": ["x"]}, checkpoint_id="99999")


async def test_update_state_is_refused_while_a_run_awaits(lg: LangGraph) -> None:
    key = "lg-update-busy-" + lg.agency
    lg.llm.script(key, [ScriptStep(tool_calls=[call("lookup", word="w")])])
    thread_id = (await lg.client.threads.create(graph_id="approver"))["thread_id"]
    paused = await lg.client.runs.wait(thread_id, "approver", input=ask(key))
    assert isinstance(paused, dict) and paused["__interrupt__"]
    with pytest.raises(ConflictError, match="running"):
        await lg.client.threads.update_state(thread_id, {"messages": ["more"]})


async def test_what_update_state_cannot_take(lg: LangGraph) -> None:
    thread_id = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    with pytest.raises(BadRequestError, match="nothing to add"):
        await lg.client.threads.update_state(thread_id, {})
    with pytest.raises(BadRequestError, match="does not map"):
        await lg.client.threads.update_state(thread_id, {"counter": 1})
    with pytest.raises(BadRequestError, match="todos"):
        await lg.client.threads.update_state(thread_id, {"todos": [{"status": "odd"}]})
    with pytest.raises(BadRequestError, match="one state"):
        await lg.client.threads.update_state(thread_id, [{"messages": []}])  # type: ignore[arg-type]
    key, _, _ = await new_tenant(lg.url, "lg-other")
    async with get_client(url=f"{lg.url}/langgraph", api_key=key) as other:
        with pytest.raises(NotFoundError):
            await other.threads.update_state(thread_id, {"messages": ["intrusion"]})
    assert (await lg.client.threads.get_state(thread_id))["values"]["messages"] == []


async def test_an_update_as_a_node_decides_what_is_next(lg: LangGraph) -> None:
    key = "lg-update-as-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="went on from the update")])
    thread_id = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    note = {"messages": [{"type": "human", "content": f"look this up {key}"}]}
    await lg.client.threads.update_state(thread_id, note, as_node="tools")
    # As after a tool step: the model is next, as a task of its own.
    state = await lg.client.threads.get_state(thread_id)
    assert state["next"] == ["model"] and [t["name"] for t in state["tasks"]] == ["model"]
    (newest, *_) = await lg.client.threads.get_history(thread_id)
    assert newest["next"] == ["model"]
    assert (await lg.client.threads.get(thread_id))["status"] == "idle"

    # A run without input goes on from there: the model answers what the update left.
    result = await lg.client.runs.wait(thread_id, "worker", input=None)
    assert isinstance(result, dict)
    assert result["messages"][-1]["content"] == "went on from the update"
    assert (await lg.client.threads.get_state(thread_id))["next"] == []

    # As the model, after an answer without tool calls: nothing is next.
    await lg.client.threads.update_state(
        thread_id, {"messages": [{"type": "ai", "content": "a person's answer"}]}, as_node="model"
    )
    state = await lg.client.threads.get_state(thread_id)
    assert state["next"] == [] and state["tasks"] == []
    with pytest.raises(BadRequestError, match=r"as_node 'agent'.*'model' and 'tools'"):
        await lg.client.threads.update_state(thread_id, {"messages": ["x"]}, as_node="agent")


async def test_a_thread_is_created_with_its_supersteps_written_in_order(lg: LangGraph) -> None:
    """`threads.create(supersteps=…)`, as a thread copied from elsewhere is: each update
    written as `update_state` writes it; the thread reads as the copy, and a run goes on."""
    key = f"lg-supersteps-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="continued")] * 3)  # whichever step it counts
    supersteps = [
        {"updates": [{"values": {"messages": [{"role": "user", "content": "first"}]},
                      "as_node": "__start__"}]},
        {"updates": [{"values": {"messages": [{"role": "ai", "content": "an answer"}],
                                 "todos": [{"content": "plan", "status": "pending"}]},
                      "as_node": "model"}]},
        {"updates": [{"values": {"files": {"notes.md": "copied"}}, "as_node": None}]},
    ]  # fmt: skip
    thread = await lg.client.threads.create(graph_id="worker", supersteps=supersteps)
    state = await lg.client.threads.get_state(thread["thread_id"])
    assert [m["content"] for m in state["values"]["messages"]] == ["first", "an answer"]
    assert state["values"]["todos"][0]["content"] == "plan"
    assert state["values"]["files"] == {"notes.md": "copied"}
    history = await lg.client.threads.get_history(thread["thread_id"], limit=100)
    assert len(history) >= 4
    final = await lg.client.runs.wait(thread["thread_id"], "worker", input=ask(key))
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "continued"
    malformed = [{"updates": [{"values": "x", "as_node": "model"}]}]
    with pytest.raises(BadRequestError, match="superstep 0"):
        await lg.client.threads.create(graph_id="worker", supersteps=malformed)
    bad = [{"updates": [{"values": {"messages": []}, "as_node": "agent"}]}]
    with pytest.raises(BadRequestError, match="as_node"):
        await lg.client.threads.create(graph_id="worker", supersteps=bad)
