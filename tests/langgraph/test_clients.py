"""What the clients people already run send before and around their runs: browser
preflights, `/info` and `/ok`, threads they name themselves, inputs with keys of their own."""

from __future__ import annotations

import uuid

import httpx
import pytest
from langgraph_sdk.errors import NotFoundError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import APP_ORIGIN, LangGraph
from tests.langgraph.helpers import WAIT, ask

PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,x-api-key",
}


async def test_a_preflight_from_an_allowed_origin_passes_without_a_key(lg: LangGraph) -> None:
    async with httpx.AsyncClient(base_url=f"{lg.url}/langgraph", timeout=WAIT) as http:
        for origin in (APP_ORIGIN, "http://localhost:3000"):
            r = await http.options("/threads/search", headers={"Origin": origin, **PREFLIGHT})
            assert r.status_code == 204, r.text
            assert r.headers["access-control-allow-origin"] == origin
            assert "POST" in r.headers["access-control-allow-methods"]
            assert r.headers["access-control-allow-headers"] == "content-type,x-api-key"
            assert "access-control-allow-credentials" not in r.headers


async def test_answers_to_an_allowed_origin_carry_cors_headers_errors_too(lg: LangGraph) -> None:
    async with httpx.AsyncClient(base_url=f"{lg.url}/langgraph", timeout=WAIT) as http:
        ok = await http.post(
            "/threads/search", json={}, headers={"Origin": APP_ORIGIN, "x-api-key": lg.key}
        )
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == APP_ORIGIN
        exposed = ok.headers["access-control-expose-headers"]
        assert {"Location", "Content-Location", "X-Request-Id"} <= set(exposed.split(", "))
        refused = await http.post("/threads/search", json={}, headers={"Origin": APP_ORIGIN})
        assert refused.status_code == 401
        assert refused.headers["access-control-allow-origin"] == APP_ORIGIN


async def test_another_origin_gets_no_cors_header_and_a_refused_preflight(lg: LangGraph) -> None:
    evil = "https://evil.example"
    async with httpx.AsyncClient(base_url=f"{lg.url}/langgraph", timeout=WAIT) as http:
        r = await http.options("/threads/search", headers={"Origin": evil, **PREFLIGHT})
        assert r.status_code == 403
        assert "not allowed" in r.json()["error"] and "AGENCY_CORS_ORIGINS" in r.json()["error"]
        assert "access-control-allow-origin" not in r.headers
        r = await http.post(
            "/threads/search", json={}, headers={"Origin": evil, "x-api-key": lg.key}
        )
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


async def test_info_and_ok_answer_without_a_key(lg: LangGraph) -> None:
    async with httpx.AsyncClient(base_url=f"{lg.url}/langgraph", timeout=WAIT) as http:
        info = await http.get("/info")
        assert info.status_code == 200, info.text
        assert info.json()["flags"]["assistants"] is True
        assert isinstance(info.json()["version"], str)
        ok = await http.get("/ok")
        assert ok.status_code == 200 and ok.json() == {"ok": True}


async def test_a_thread_the_client_names_is_run_by_any_assistant(lg: LangGraph) -> None:
    """AG-UI's flow: `threads.create(thread_id=…)` without an assistant, then a run with
    `if_not_exists`, its input carrying keys of its own (`tools`), which are ignored."""
    key = "lg-named-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="made on the way")])
    thread_id = str(uuid.uuid4())
    thread = await lg.client.threads.create(thread_id=thread_id, metadata={"user": "ann"})
    assert thread["thread_id"] == thread_id and thread["status"] == "idle"
    assert thread["metadata"]["user"] == "ann"
    assert (await lg.client.threads.get_state(thread_id))["values"]["messages"] == []
    final = await lg.client.runs.wait(
        thread_id,
        "approver",
        input={**ask(key), "tools": [{"name": "client_tool"}], "context": []},
        if_not_exists="create",
    )
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "made on the way"
    assert (await lg.client.threads.get(thread_id))["metadata"]["graph_id"] == "approver"
    again = await lg.client.threads.create(thread_id=thread_id, if_exists="do_nothing")
    assert again["thread_id"] == thread_id and len(again["values"]["messages"]) == 2


async def test_a_run_on_an_unknown_thread_without_if_not_exists_is_not_found(
    lg: LangGraph,
) -> None:
    with pytest.raises(NotFoundError, match="not found"):
        await lg.client.runs.create(str(uuid.uuid4()), "worker", input=ask("x"))


async def test_a_run_with_if_not_exists_creates_the_thread_it_names(lg: LangGraph) -> None:
    key = "lg-if-not-exists-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="created by the run")])
    thread_id = str(uuid.uuid4())
    final = await lg.client.runs.wait(thread_id, "worker", input=ask(key), if_not_exists="create")
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "created by the run"
    assert (await lg.client.threads.get(thread_id))["metadata"]["graph_id"] == "worker"
