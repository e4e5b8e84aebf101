"""Runs with `after_seconds` through the SDK: pending on the log until they are due, then
run; canceled before, they never start."""

from __future__ import annotations

import asyncio
import time

import pytest
from langgraph_sdk.errors import BadRequestError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, until_status


def _asked_about(lg: LangGraph, key: str) -> bool:
    return any(key in str(body["messages"]) for body in lg.llm.requests)


async def test_a_delayed_run_is_pending_until_it_is_due(lg: LangGraph) -> None:
    key = "lg-delayed-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="later, as asked")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    asked_at = time.monotonic()
    run = await lg.client.runs.create(thread, "worker", input=ask(key), after_seconds=2)
    assert run["status"] == "pending"
    listed = await lg.client.runs.list(thread)
    assert [(r["run_id"], r["status"]) for r in listed] == [(run["run_id"], "pending")]
    assert (await lg.client.runs.get(thread, run["run_id"]))["status"] == "pending"
    assert not _asked_about(lg, key)

    final = await lg.client.runs.join(thread, run["run_id"])
    assert time.monotonic() - asked_at >= 2
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"]] == [key, "later, as asked"]
    assert (await lg.client.runs.get(thread, run["run_id"]))["status"] == "success"


async def test_a_delayed_run_canceled_before_it_is_due_never_starts(lg: LangGraph) -> None:
    key = "lg-delayed-canceled-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="should not be said")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    run = await lg.client.runs.create(thread, "worker", input=ask(key), after_seconds=1)
    await lg.client.runs.cancel(thread, run["run_id"])
    await until_status(lg.client, thread, run["run_id"], {"interrupted"})
    # A later delayed run of the thread runs once the canceled one was due: the canceled
    # one's invoke, decided then, started nothing.
    later = "lg-delayed-after-" + lg.agency
    lg.llm.script(later, [ScriptStep(content="this one runs")])
    second = await lg.client.runs.create(thread, "worker", input=ask(later), after_seconds=2)
    async with asyncio.timeout(30):
        final = await lg.client.runs.join(thread, second["run_id"])
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"]] == [later, "this one runs"]
    assert not _asked_about(lg, key)
    assert (await lg.client.runs.get(thread, run["run_id"]))["status"] == "interrupted"


async def test_after_seconds_out_of_bounds_or_with_a_command_is_400(lg: LangGraph) -> None:
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    with pytest.raises(BadRequestError, match="after_seconds is 0 to 604800"):
        await lg.client.runs.create(thread, "worker", input=ask("x"), after_seconds=-5)
    with pytest.raises(BadRequestError, match="after_seconds is 0 to 604800"):
        await lg.client.runs.create(thread, "worker", input=ask("x"), after_seconds=10**7)
    with pytest.raises(BadRequestError, match="goes on at once"):
        await lg.client.runs.create(thread, "worker", command={"resume": True}, after_seconds=5)


async def test_a_copy_of_a_thread_does_not_inherit_its_delayed_run(lg: LangGraph) -> None:
    """The delayed run's invoke is the original thread's: in the copy it ends canceled."""
    key = "lg-delayed-copy-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="in the original only")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    run = await lg.client.runs.create(thread, "worker", input=ask(key), after_seconds=1)
    copy = str((await lg.client.threads.copy(thread))["thread_id"])
    assert (await lg.client.runs.get(copy, run["run_id"]))["status"] == "interrupted"
    final = await lg.client.runs.join(thread, run["run_id"])
    assert isinstance(final, dict)
    assert final["messages"][-1]["content"] == "in the original only"
    assert (await lg.client.threads.get_state(copy))["values"]["messages"] == []
