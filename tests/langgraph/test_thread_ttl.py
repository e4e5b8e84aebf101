"""A thread's `ttl` through the official SDK client: the thread is deleted once idle that
long, as `threads.delete` deletes it, by the retention sweep (docs/data.md, "Retention")."""

from __future__ import annotations

import pytest
from langgraph_sdk.errors import APIStatusError, BadRequestError

from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask

# LangGraph's ttl is minutes; fractions are taken as they come: 0.1 is 6 seconds.
SHORT = 0.1


async def _status(lg: LangGraph, thread_id: str) -> tuple[int, str]:
    try:
        await lg.client.threads.get(thread_id)
    except APIStatusError as e:
        return e.status_code, str(e)
    return 200, ""


async def test_threads_past_their_ttl_are_deleted_and_others_kept(lg: LangGraph) -> None:
    key = "ttl-" + new_id()
    lg.llm.script(key, [ScriptStep(content="kept a little while")])
    # Given after a run: the thread's retention counts from its last event, the ttl's.
    updated = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    await lg.client.runs.wait(updated["thread_id"], "worker", input=ask(key))
    await lg.client.threads.update(
        updated["thread_id"], metadata={}, ttl={"strategy": "delete", "ttl": SHORT}
    )
    created = await lg.client.threads.create(
        graph_id="worker", ttl={"strategy": "delete", "ttl": SHORT}
    )
    kept = await lg.client.threads.create(graph_id="worker", metadata={"user": "ann"})
    expiring = [created["thread_id"], updated["thread_id"]]

    async def all_gone() -> None:
        for thread_id in expiring:
            status, text = await _status(lg, thread_id)
            assert status == 410 and "at the request of retention" in text, (thread_id, text)

    await assert_eventually(all_gone, timeout=60, interval=0.5)
    found = await lg.client.threads.search(metadata={"user": "ann"})
    assert [t["thread_id"] for t in found] == [kept["thread_id"]]
    assert await _status(lg, kept["thread_id"]) == (200, "")


async def test_a_ttl_that_does_not_map_is_refused(lg: LangGraph) -> None:
    with pytest.raises(BadRequestError, match="keep_latest"):
        await lg.client.threads.create(ttl={"strategy": "keep_latest", "ttl": 5})
    with pytest.raises(BadRequestError, match="minutes"):
        await lg.client.threads.create(ttl={"strategy": "delete", "ttl": -1})
    with pytest.raises(BadRequestError, match="minutes"):
        await lg.client.threads.create(ttl={"strategy": "delete"})
