"""`runs.cancel_many` through the official SDK client."""

from __future__ import annotations

import pytest
from langgraph_sdk.errors import BadRequestError

from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, until_status


async def _running(lg: LangGraph, name: str) -> tuple[str, str]:
    key = f"lg-{name}-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="never", delay_ms=20_000)])
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    run = await lg.client.runs.create(thread, "worker", input=ask(key))
    await until_status(lg.client, thread, run["run_id"], {"running"})
    return thread, run["run_id"]


async def test_cancel_many_by_thread_and_by_status(lg: LangGraph) -> None:
    one, run_one = await _running(lg, "many-1")
    two, run_two = await _running(lg, "many-2")
    await lg.client.runs.cancel_many(thread_id=one, run_ids=[run_one])
    await until_status(lg.client, one, run_one, {"interrupted"})
    assert (await lg.client.runs.get(two, run_two))["status"] == "running"
    await lg.client.runs.cancel_many(status="pending")  # queued runs only: none here
    assert (await lg.client.runs.get(two, run_two))["status"] == "running"
    await lg.client.runs.cancel_many(status="running")

    async def canceled() -> None:
        assert (await lg.client.runs.get(two, run_two))["status"] == "interrupted"

    await assert_eventually(canceled, timeout=20)
    with pytest.raises(BadRequestError, match="rollback"):
        await lg.client.runs.cancel_many(status="all", action="rollback")
    with pytest.raises(BadRequestError, match="name the runs"):
        await lg.client.runs.cancel_many()
