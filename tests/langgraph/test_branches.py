"""Runs from a past checkpoint through the SDK: the thread's state is set back to that
checkpoint's (appended, nothing removed), the run starts from there, and the history shows
the branch."""

from __future__ import annotations

import httpx
import pytest
from langgraph_sdk.errors import BadRequestError, NotFoundError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask


async def test_a_run_from_a_past_checkpoint_starts_from_its_state(lg: LangGraph) -> None:
    key = "lg-branch-" + lg.agency
    first, second, branch = key, key + "-second", key + "-branch"  # the longest key wins
    lg.llm.script(first, [ScriptStep(content="one")])
    lg.llm.script(second, [ScriptStep(content="two")] * 2)
    lg.llm.script(branch, [ScriptStep(content="another two")] * 2)
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    await lg.client.runs.wait(thread, "worker", input=ask(first))
    after_one = (await lg.client.threads.get_state(thread))["checkpoint"]["checkpoint_id"]
    await lg.client.runs.wait(thread, "worker", input=ask(second))

    final = await lg.client.runs.wait(thread, "worker", input=ask(branch), checkpoint_id=after_one)
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"]] == [first, "one", branch, "another two"]
    asked = next(b for b in reversed(lg.llm.requests) if branch in str(b["messages"]))
    assert [m["content"] for m in asked["messages"] if m["role"] != "system"] == [
        first,
        "one",
        branch,
    ]
    # Nothing removed: the second run is still the thread's, and its state in the history.
    runs = await lg.client.runs.list(thread)
    assert len(runs) == 3 and {r["status"] for r in runs} == {"success"}
    history = await lg.client.threads.get_history(thread, limit=20)
    contents = [[m["content"] for m in h["values"]["messages"]] for h in history]
    assert [first, "one", second, "two"] in contents
    # The branch: a checkpoint holding the state at `after_one` again, its parent.
    (restored,) = [
        h for h in history
        if (h["parent_checkpoint"] or {}).get("checkpoint_id") == after_one
        and [m["content"] for m in h["values"]["messages"]] == [first, "one"]
    ]  # fmt: skip
    at_one = await lg.client.threads.get_state(thread, checkpoint_id=after_one)
    assert [m["id"] for m in restored["values"]["messages"]] == [
        m["id"] for m in at_one["values"]["messages"]
    ]
    # Agency's own view of the thread (its read models) is the branch's state too.
    headers = {"Authorization": f"Bearer {lg.key}"}
    async with httpx.AsyncClient(base_url=lg.url, headers=headers, timeout=20) as http:
        r = await http.get(f"/agency/{lg.agency}/agent/{thread}/state")
        assert r.status_code == 200, r.text
        messages = r.json()["state"]["messages"]
    assert [m["content"] for m in messages] == [first, "one", branch, "another two"]


async def test_a_checkpoint_the_thread_does_not_have_is_refused(lg: LangGraph) -> None:
    key = "lg-branch-bad-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="one")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    await lg.client.runs.wait(thread, "worker", input=ask(key))
    with pytest.raises(BadRequestError, match="event seq"):
        await lg.client.runs.create(thread, "worker", input=ask(key), checkpoint_id="abc")
    with pytest.raises(NotFoundError, match="no checkpoint"):
        await lg.client.runs.create(thread, "worker", input=ask(key), checkpoint_id="999999")
    first = (await lg.client.threads.get_history(thread))[-1]["checkpoint"]["checkpoint_id"]
    before = await lg.client.threads.get_state(thread)
    bad = {"messages": [{"type": "human", "content": [{"type": "audio"}]}]}
    with pytest.raises(BadRequestError, match="audio"):
        await lg.client.runs.create(thread, "worker", input=bad, checkpoint_id=first)
    assert (await lg.client.threads.get_state(thread))["checkpoint"] == before["checkpoint"]
    with pytest.raises(NotFoundError, match="not a checkpoint"):
        await lg.client.runs.create(
            thread, "worker", input=ask(key), checkpoint={"checkpoint_id": "1"}
        )
