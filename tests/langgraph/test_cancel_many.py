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


async def test_cancel_many_pending_withdraws_a_delayed_run_of_an_idle_thread(lg: LangGraph) -> None:
    key = f"lg-many-delayed-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="should not be said")])
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    run = await lg.client.runs.create(thread, "worker", input=ask(key), after_seconds=30)
    assert (await lg.client.threads.get(thread))["status"] == "idle"

    async def withdrawn() -> None:
        # The agency's threads are read from the read models, which see the run shortly.
        await lg.client.runs.cancel_many(status="pending")
        assert (await lg.client.runs.get(thread, run["run_id"]))["status"] == "interrupted"

    await assert_eventually(withdrawn, timeout=20)
    assert not any(key in str(body["messages"]) for body in lg.llm.requests)
