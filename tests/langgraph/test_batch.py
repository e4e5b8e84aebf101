"""`runs.create_batch` through the official SDK client."""

from __future__ import annotations

import pytest
from langgraph_sdk.errors import BadRequestError, NotFoundError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, until_status


async def test_a_batch_starts_each_run(lg: LangGraph) -> None:
    key = "lg-batch-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="batch answer")] * 4)
    thread = await lg.client.threads.create(graph_id="worker")
    runs = await lg.client.runs.create_batch(
        [
            {"assistant_id": "worker", "input": ask(key)},
            {"assistant_id": "worker", "input": ask(key)},
            {"assistant_id": "worker", "input": ask(key), "thread_id": thread["thread_id"]},
        ]
    )
    assert len(runs) == 3 and len({r["thread_id"] for r in runs}) == 3
    assert runs[2]["thread_id"] == thread["thread_id"]
    for run in runs:
        await until_status(lg.client, run["thread_id"], run["run_id"], {"success"})
        state = await lg.client.threads.get_state(run["thread_id"])
        assert state["values"]["messages"][-1]["content"] == "batch answer"


async def test_a_bad_item_starts_nothing_and_is_named(lg: LangGraph) -> None:
    before = await lg.client.threads.count()
    with pytest.raises(NotFoundError, match="batch item 1: assistant 'nosuch'"):
        await lg.client.runs.create_batch(
            [{"assistant_id": "worker", "input": ask("x")}, {"assistant_id": "nosuch"}]
        )
    with pytest.raises(BadRequestError, match="batch item 0: not mapped"):
        await lg.client.runs.create_batch(
            [{"assistant_id": "worker", "input": ask("x"), "interrupt_before": ["agent"]}]
        )
    with pytest.raises(BadRequestError, match="batch holds"):
        await lg.client.runs.create_batch([])
    assert await lg.client.threads.count() == before
