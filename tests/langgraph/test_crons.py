"""Crons through the official SDK client: agent schedules of the agency, run in the
assistant's thread of `@global`."""

from __future__ import annotations

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import BadRequestError, NotFoundError

from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.langgraph.conftest import LangGraph, new_tenant
from tests.langgraph.helpers import ask


async def test_a_cron_runs_its_assistant_each_tick_until_deleted(lg: LangGraph) -> None:
    key = "lg-cron-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="tick answered")] * 50)
    cron = await lg.client.crons.create("worker", schedule="* * * * * *", input=ask(key))
    assert cron["assistant_id"] == "worker" and cron["schedule"] == "* * * * * *"
    assert cron["enabled"] and cron["next_run_date"] is not None
    thread_id = cron["thread_id"]
    assert thread_id

    async def answered() -> None:
        state = await lg.client.threads.get_state(thread_id)
        contents = [m["content"] for m in state["values"]["messages"]]
        assert "tick answered" in contents and any(key in c for c in contents)

    await assert_eventually(answered, timeout=20)

    found = await lg.client.crons.search(assistant_id="worker")
    assert [c["cron_id"] for c in found] == [cron["cron_id"]]
    assert await lg.client.crons.count(assistant_id="worker") == 1
    assert await lg.client.crons.count(assistant_id="approver") == 0

    updated = await lg.client.crons.update(cron["cron_id"], schedule="0 9 * * 1")
    assert updated["schedule"] == "0 9 * * 1" and updated["cron_id"] == cron["cron_id"]

    await lg.client.crons.delete(cron["cron_id"])
    assert await lg.client.crons.search() == []
    with pytest.raises(NotFoundError):
        await lg.client.crons.delete(cron["cron_id"])


async def test_what_a_cron_cannot_take_is_refused_with_the_reason(lg: LangGraph) -> None:
    with pytest.raises(BadRequestError, match="5 fields"):
        await lg.client.crons.create("worker", schedule="every day", input=ask("x"))
    with pytest.raises(BadRequestError, match="timezone"):
        await lg.client.crons.create(
            "worker", schedule="0 9 * * *", input=ask("x"), timezone="Europe/Paris"
        )
    with pytest.raises(BadRequestError, match=r"input\.messages"):
        await lg.client.crons.create("worker", schedule="0 9 * * *")
    with pytest.raises(NotFoundError, match="nosuch"):
        await lg.client.crons.create("nosuch", schedule="0 9 * * *", input=ask("x"))
    thread = await lg.client.threads.create(graph_id="worker")
    with pytest.raises(BadRequestError, match="@global"):
        await lg.client.crons.create_for_thread(
            thread["thread_id"], "worker", schedule="0 9 * * *", input=ask("x")
        )


async def test_another_tenant_sees_no_cron_of_ours(lg: LangGraph) -> None:
    cron = await lg.client.crons.create("worker", schedule="0 9 * * *", input=ask("hello"))
    key, _, _ = await new_tenant(lg.url, "lg-other")
    async with get_client(url=f"{lg.url}/langgraph", api_key=key) as other:
        assert await other.crons.search() == []
        with pytest.raises(NotFoundError):
            await other.crons.delete(cron["cron_id"])
        with pytest.raises(NotFoundError):
            await other.crons.update(cron["cron_id"], schedule="0 10 * * *")
    assert [c["cron_id"] for c in await lg.client.crons.search()] == [cron["cron_id"]]
