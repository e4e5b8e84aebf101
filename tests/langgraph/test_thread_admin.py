"""Threads updated, counted, copied (and not deleted) through the official SDK client."""

from __future__ import annotations

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError, BadRequestError, ConflictError, NotFoundError

from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph, new_tenant
from tests.langgraph.helpers import ask


async def test_update_sets_metadata_as_an_event_on_the_log(lg: LangGraph) -> None:
    thread = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    thread_id = thread["thread_id"]
    updated = await lg.client.threads.update(thread_id, metadata={"topic": "tax", "user": "bob"})
    assert updated["metadata"]["topic"] == "tax" and updated["metadata"]["user"] == "bob"
    assert updated["metadata"]["graph_id"] == "worker"
    got = await lg.client.threads.get(thread_id)
    assert got["metadata"]["topic"] == "tax"
    found = await lg.client.threads.search(metadata={"topic": "tax"})
    assert [t["thread_id"] for t in found] == [thread_id]
    assert (
        await lg.client.threads.update(thread_id, metadata={"a": "b"}, return_minimal=True) is None
    )
    async with httpx.AsyncClient(base_url=lg.url, timeout=20) as http:
        r = await http.get(
            f"/agency/{lg.agency}/agent/{thread_id}/events",
            headers={"Authorization": f"Bearer {lg.key}"},
        )
    assert r.status_code == 200, r.text
    set_events = [e for e in r.json()["events"] if e["type"] == "thread.metadata_set"]
    assert len(set_events) == 2

    with pytest.raises(ConflictError, match="graph_id"):
        await lg.client.threads.update(thread_id, metadata={"graph_id": "approver"})
    with pytest.raises(BadRequestError, match="must be strings"):
        await lg.client.threads.update(thread_id, metadata={"n": 1})
    with pytest.raises(BadRequestError, match="keep_latest"):
        await lg.client.threads.update(
            thread_id, metadata={}, ttl={"strategy": "keep_latest", "ttl": 5}
        )
    with pytest.raises(NotFoundError):
        await lg.client.threads.update("01jnosuchthread0000000000", metadata={"a": "b"})


async def test_count_counts_what_search_lists(lg: LangGraph) -> None:
    for user in ("ann", "ann", "bob"):
        await lg.client.threads.create(graph_id="worker", metadata={"user": user})
    assert await lg.client.threads.count() == 3
    assert await lg.client.threads.count(metadata={"user": "ann"}) == 2
    assert await lg.client.threads.count(metadata={"graph_id": "approver"}) == 0
    assert await lg.client.threads.count(status="idle") == 3
    assert await lg.client.threads.count(status="busy") == 0


async def test_copy_is_a_fork_with_the_same_history(lg: LangGraph) -> None:
    key = "lg-copy-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="original answer")])
    thread = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    await lg.client.runs.wait(thread["thread_id"], "worker", input=ask(key))
    copy = await lg.client.threads.copy(thread["thread_id"])
    assert copy["thread_id"] != thread["thread_id"]
    assert copy["metadata"]["user"] == "ann" and copy["status"] == "idle"
    contents = [m["content"] for m in copy["values"]["messages"]]
    assert contents == [key, "original answer"]
    lg.llm.script(key + "-more", [ScriptStep(content="on the copy")])
    await lg.client.runs.wait(copy["thread_id"], "worker", input=ask(key + "-more"))
    original = await lg.client.threads.get(thread["thread_id"])
    assert len(original["values"]["messages"]) == 2


async def test_a_deleted_thread_answers_gone_with_when_and_who(lg: LangGraph) -> None:
    key = "delete-" + new_id()
    lg.llm.script(key, [ScriptStep(content="soon forgotten")])
    thread = await lg.client.threads.create(graph_id="worker")
    await lg.client.runs.wait(thread["thread_id"], "worker", input=ask(key))
    with pytest.raises(BadRequestError, match="append-only"):
        await lg.client.runs.delete(thread["thread_id"], "some-run")

    await lg.client.threads.delete(thread["thread_id"])
    await lg.client.threads.delete(thread["thread_id"])  # a repeat is harmless

    with pytest.raises(APIStatusError) as gone:
        await lg.client.threads.get(thread["thread_id"])
    assert gone.value.status_code == 410
    assert "deleted at" in str(gone.value) and "at the request of api-key:" in str(gone.value)
    with pytest.raises(APIStatusError) as state:
        await lg.client.threads.get_state(thread["thread_id"])
    assert state.value.status_code == 410


async def test_a_thread_awaiting_its_first_run_is_deleted_too(lg: LangGraph) -> None:
    thread = await lg.client.threads.create()
    await lg.client.threads.delete(thread["thread_id"])
    with pytest.raises(APIStatusError) as gone:
        await lg.client.threads.get(thread["thread_id"])
    assert gone.value.status_code == 410


async def test_prune_deletes_the_threads_it_names(lg: LangGraph) -> None:
    key = "prune-" + new_id()
    lg.llm.script(key, [ScriptStep(content="pruned soon")])
    ran = await lg.client.threads.create(graph_id="worker")
    await lg.client.runs.wait(ran["thread_id"], "worker", input=ask(key))
    empty = await lg.client.threads.create()
    kept = await lg.client.threads.create(graph_id="worker")
    names = [ran["thread_id"], empty["thread_id"]]
    assert await lg.client.threads.prune(names) == {"pruned_count": 2}
    assert await lg.client.threads.prune(names) == {"pruned_count": 2}  # a repeat is harmless
    for thread_id in names:
        with pytest.raises(APIStatusError) as gone:
            await lg.client.threads.get(thread_id)
        assert gone.value.status_code == 410
    assert (await lg.client.threads.get(kept["thread_id"]))["thread_id"] == kept["thread_id"]
    with pytest.raises(BadRequestError, match="keep_latest"):
        await lg.client.threads.prune([kept["thread_id"]], strategy="rewind")  # type: ignore[arg-type]
    with pytest.raises(NotFoundError):
        await lg.client.threads.prune([kept["thread_id"], "nosuch-thread"])
    assert (await lg.client.threads.get(kept["thread_id"]))["thread_id"] == kept["thread_id"]


async def test_prune_keep_latest_keeps_the_state_and_drops_past_checkpoints(
    lg: LangGraph,
) -> None:
    key = "prune-latest-" + new_id()
    lg.llm.script(key, [ScriptStep(content="first"), ScriptStep(content="second")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    await lg.client.runs.wait(thread, "worker", input=ask(key))
    await lg.client.runs.wait(thread, "worker", input=ask(f"{key} again"))
    past = await lg.client.threads.get_history(thread, limit=100)
    latest = await lg.client.threads.get_state(thread)
    assert len(past) == 4 and past[0]["checkpoint"] == latest["checkpoint"]

    assert await lg.client.threads.prune([thread], strategy="keep_latest") == {"pruned_count": 1}
    [kept] = await lg.client.threads.get_history(thread, limit=100)
    assert kept["checkpoint"] == latest["checkpoint"] and kept["parent_checkpoint"] is None
    assert kept["values"] == latest["values"]
    state = await lg.client.threads.get_state(thread)
    assert [m["content"] for m in state["values"]["messages"]] == [
        key,
        "first",
        f"{key} again",
        "second",
    ]
    oldest = str(past[-1]["checkpoint"]["checkpoint_id"])
    with pytest.raises(NotFoundError, match="pruned"):
        await lg.client.threads.get_state(thread, checkpoint_id=oldest)
    with pytest.raises(NotFoundError, match="pruned"):
        await lg.client.runs.create(thread, "worker", input=ask(key), checkpoint_id=oldest)
    at = {"checkpoint_id": oldest, "input": ask(key)}
    fork = {"id": 1, "method": "state.fork", "params": at}
    async with httpx.AsyncClient(base_url=f"{lg.url}/langgraph", timeout=20) as http:
        r = await http.post(f"/threads/{thread}/commands", json=fork, headers={"x-api-key": lg.key})
    assert r.status_code == 404 and "pruned" in r.text, r.text
    # A repeat prunes nothing more; the thread's next steps are checkpoints again.
    assert await lg.client.threads.prune([thread], strategy="keep_latest") == {"pruned_count": 1}
    lg.llm.script(f"{key}-next", [ScriptStep(content="third")])
    await lg.client.runs.wait(thread, "worker", input=ask(f"{key}-next"))
    history = await lg.client.threads.get_history(thread, limit=100)
    assert len(history) == 3 and history[-1]["checkpoint"] == latest["checkpoint"]


async def test_another_tenant_cannot_update_count_or_copy_ours(lg: LangGraph) -> None:
    thread = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    key, _, _ = await new_tenant(lg.url, "lg-other")
    async with get_client(url=f"{lg.url}/langgraph", api_key=key) as other:
        with pytest.raises(NotFoundError):
            await other.threads.update(thread["thread_id"], metadata={"user": "eve"})
        with pytest.raises(NotFoundError):
            await other.threads.copy(thread["thread_id"])
        with pytest.raises(NotFoundError):
            await other.threads.prune([thread["thread_id"]])
        assert await other.threads.count() == 0
    assert (await lg.client.threads.get(thread["thread_id"]))["metadata"]["user"] == "ann"
