"""Crons through the official SDK client: agent schedules of the agency, run in the
assistant's thread of `@global`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import APIStatusError, BadRequestError, NotFoundError

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
    with pytest.raises(BadRequestError, match="IANA"):
        await lg.client.crons.create(
            "worker", schedule="0 9 * * *", input=ask("x"), timezone="Mars/Olympus"
        )
    with pytest.raises(BadRequestError, match="webhook"):
        await lg.client.crons.create(
            "worker", schedule="0 9 * * *", input=ask("x"), webhook="https://hooks.example/x"
        )
    async with httpx.AsyncClient(base_url=f"{lg.url}/langgraph", timeout=20) as http:
        r = await http.post(
            "/runs/crons",
            json={"assistant_id": "worker", "schedule": "0 9 * * *", "input": ask("x"),
                  "end_time": "tomorrow"},
            headers={"x-api-key": lg.key},
        )  # fmt: skip
        assert r.status_code == 400 and "ISO 8601" in r.text
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


async def test_a_cron_keeps_its_time_zone_end_metadata_and_whether_it_is_enabled(
    lg: LangGraph,
) -> None:
    end = datetime.now(UTC) + timedelta(days=30)
    cron = await lg.client.crons.create(
        "worker", schedule="0 9 * * *", input=ask("morning"), timezone="Europe/Paris",
        end_time=end, metadata={"team": "ops"}, config={"tags": ["a"]},
    )  # fmt: skip
    assert cron["timezone"] == "Europe/Paris" and cron["enabled"] is True
    assert datetime.fromisoformat(cron["end_time"]) == end
    assert cron["metadata"]["team"] == "ops"
    upcoming = datetime.fromisoformat(cron["next_run_date"])
    local = upcoming.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute) == (9, 0) and upcoming.utcoffset() is not None
    assert [c["cron_id"] for c in await lg.client.crons.search(metadata={"team": "ops"})] == [
        cron["cron_id"]
    ]
    assert await lg.client.crons.search(metadata={"team": "dev"}) == []

    paused = await lg.client.crons.update(cron["cron_id"], enabled=False)
    assert paused["enabled"] is False and paused["next_run_date"] is None
    assert paused["timezone"] == "Europe/Paris" and paused["metadata"]["team"] == "ops"
    assert await lg.client.crons.search(enabled=True) == []
    assert [c["cron_id"] for c in await lg.client.crons.search(enabled=False)] == [cron["cron_id"]]
    again = await lg.client.crons.update(cron["cron_id"], enabled=True, schedule="30 7 * * *")
    assert again["enabled"] is True and again["schedule"] == "30 7 * * *"
    assert again["next_run_date"] is not None


async def test_a_cron_past_its_end_time_runs_no_more(lg: LangGraph) -> None:
    """Every second until an end a few seconds away: it runs, then stops by itself."""
    key = "lg-cron-end-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="tick answered")] * 50)
    end = datetime.now(UTC) + timedelta(seconds=3)
    cron = await lg.client.crons.create(
        "worker", schedule="* * * * * *", input=ask(key), end_time=end
    )
    thread_id = cron["thread_id"]

    async def answered() -> None:
        state = await lg.client.threads.get_state(thread_id)
        assert "tick answered" in [m["content"] for m in state["values"]["messages"]]

    await assert_eventually(answered, timeout=20)

    async def over() -> None:
        [found] = await lg.client.crons.search()
        assert found["next_run_date"] is None

    await assert_eventually(over, timeout=10)
    async with httpx.AsyncClient(base_url=lg.url, timeout=20) as http:
        r = await http.get(
            f"/agency/{lg.agency}/schedules", headers={"Authorization": f"Bearer {lg.key}"}
        )
        [schedule] = [s for s in r.json() if s["id"] == cron["cron_id"]]
    last = datetime.fromisoformat(schedule["lastTick"])
    assert last <= end, "no tick fired after the end time"


async def _tick_threads(lg: LangGraph, cron_id: str) -> list[dict[str, Any]]:
    return list(await lg.client.threads.search(metadata={"cron_id": cron_id}, limit=100))


async def test_a_cron_that_deletes_runs_each_tick_on_a_thread_gone_when_its_run_ends(
    lg: LangGraph,
) -> None:
    """`on_run_completed="delete"`: LangGraph's stateless cron, a new thread each tick."""
    key = "lg-cron-delete-" + lg.agency
    # The first tick's run is slow: its thread is seen while the run works.
    lg.llm.script(
        key, [ScriptStep(content="slow tick", delay_ms=3000), *[ScriptStep(content="tick")] * 50]
    )
    cron = await lg.client.crons.create(
        "worker", schedule="* * * * * *", input=ask(key), on_run_completed="delete"
    )
    assert cron["thread_id"] is None and cron["on_run_completed"] == "delete"
    seen: set[str] = set()

    async def a_tick_runs_on_its_own_thread() -> None:
        found = await _tick_threads(lg, cron["cron_id"])
        seen.update(str(t["thread_id"]) for t in found)
        assert any(t["status"] == "busy" for t in found)

    await assert_eventually(a_tick_runs_on_its_own_thread, timeout=20)
    await lg.client.crons.delete(cron["cron_id"])

    async def every_one_gone() -> None:
        assert await _tick_threads(lg, cron["cron_id"]) == []
        for thread_id in seen:
            with pytest.raises(APIStatusError) as gone:
                await lg.client.threads.get(thread_id)
            assert gone.value.status_code == 410, thread_id

    await assert_eventually(every_one_gone, timeout=30)
    assert any(key in str(body["messages"]) for body in lg.llm.requests)


async def test_a_cron_that_keeps_runs_each_tick_on_a_new_thread_it_keeps(lg: LangGraph) -> None:
    key = "lg-cron-keep-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="tick kept")] * 50)
    cron = await lg.client.crons.create(
        "worker", schedule="* * * * * *", input=ask(key), on_run_completed="keep"
    )
    assert cron["thread_id"] is None and cron["on_run_completed"] == "keep"

    async def two_ticks_kept() -> None:
        found = await _tick_threads(lg, cron["cron_id"])
        done = [t for t in found if t["status"] == "idle"]
        assert len(done) >= 2
        for thread in done:
            contents = [m["content"] for m in thread["values"]["messages"]]
            assert contents == [key, "tick kept"], contents

    await assert_eventually(two_ticks_kept, timeout=20)
    updated = await lg.client.crons.update(cron["cron_id"], schedule="0 9 * * *")
    assert updated["on_run_completed"] == "keep" and updated["thread_id"] is None
    await lg.client.crons.delete(cron["cron_id"])
