"""Agent runs driven over HTTP, observed through `/state`, `/events` and `/tree`."""

from __future__ import annotations

from typing import Any

import pytest

from agency.contracts.events.base import Usage
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually


def done(state: dict[str, Any]) -> bool:
    return state["run"]["status"] in ("completed", "error", "canceled")


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


async def test_whole_run_with_tools_over_http(client: Client) -> None:
    key = "http-run-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("write_todos", todos=[{"content": "define", "status": "in_progress"}])]),
        ScriptStep(tool_calls=[call("lookup", word="agent"), call("write_file", path="notes.md", content="# n")]),
        ScriptStep(content="All done over HTTP."),
    ])  # fmt: skip
    thread = await client.thread()
    run_id = await client.invoke(thread, key)
    state = await client.until(thread, done)

    assert state["run"]["runId"] == run_id and state["run"]["status"] == "completed"
    assert state["run"]["step"] == 3
    body = state["state"]
    assert body["todos"] == [{"content": "define", "status": "in_progress"}]
    assert body["files"] == {"notes.md": "# n"}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]
    assert body["messages"][-1]["content"] == "All done over HTTP."
    assert {t["name"] for t in body["tools"]} >= {"lookup", "write_todos", "write_file"}

    r = await client.http.get(f"{client.path(thread)}/events", params={"fromSeq": 1, "limit": 5})
    page = r.json()
    assert [e["seq"] for e in page["events"]] == [1, 2, 3, 4, 5] and page["hasMore"] is True
    r = await client.http.get(f"{client.path(thread)}/events", params={"type": "tool.output"})
    outputs = [e["data"]["output"] for e in r.json()["events"]]
    assert "definition of agent" in outputs


async def test_hitl_over_http_shows_pending_calls_then_runs_the_modified_call(
    client: Client,
) -> None:
    key = "http-hitl-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("lookup", word="original")]),
        ScriptStep(content="approved and done"),
    ])  # fmt: skip
    thread = await client.thread("approver")
    await client.invoke(thread, key)
    paused = await client.until(thread, lambda s: s["run"]["status"] == "paused")
    assert paused["run"]["reason"] == "hitl"
    (pending,) = paused["state"]["pendingToolCalls"]
    assert pending["name"] == "lookup" and pending["args"] == {"word": "original"}
    r = await client.http.post(
        f"{client.path(thread)}/approve",
        json={"approved": True, "modifiedToolCalls": [{"id": pending["id"], "name": "lookup", "args": {"word": "edited"}}]},
    )  # fmt: skip
    assert r.status_code == 202, r.text
    state = await client.until(thread, done)
    assert state["run"]["status"] == "completed"
    assert state["state"]["pendingToolCalls"] == []
    tool = [m for m in state["state"]["messages"] if m["role"] == "tool"]
    assert tool[0]["content"] == "definition of edited"


async def test_a_thread_created_with_its_first_message_runs_it_as_an_invoke_would(
    client: Client,
) -> None:
    key = "http-create-run-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("lookup", word="first")]),
        ScriptStep(content="created, approved and done"),
    ])  # fmt: skip
    body = {"agentType": "approver", "messages": [{"role": "user", "content": key}]}
    r = await client.http.post(f"/agency/{client.agency}/agents", json=body)
    assert r.status_code == 202, r.text
    answer = r.json()
    assert answer["runStatus"] in ("running", "paused"), answer
    thread, run_id = answer["id"], answer["runId"]
    paused = await client.until(thread, lambda s: s["run"]["status"] == "paused")
    assert paused["run"]["runId"] == run_id and paused["run"]["reason"] == "hitl"
    r = await client.http.post(f"{client.path(thread)}/approve", json={"approved": True})
    assert r.status_code == 202, r.text
    state = await client.until(thread, done)
    assert state["run"]["runId"] == run_id and state["run"]["status"] == "completed"
    first = state["state"]["messages"][0]
    assert (first["role"], first["content"]) == ("user", key)
    assert state["state"]["messages"][-1]["content"] == "created, approved and done"


async def test_hitl_reject_over_http(client: Client) -> None:
    key = "http-reject-" + client.agency
    client.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="x")]), ScriptStep(content="ok, not done")]
    )
    thread = await client.thread("approver")
    await client.invoke(thread, key)
    await client.until(thread, lambda s: s["run"]["status"] == "paused")
    r = await client.http.post(f"{client.path(thread)}/approve", json={"approved": False})
    assert r.status_code == 202
    state = await client.until(thread, done)
    tool = [m for m in state["state"]["messages"] if m["role"] == "tool"]
    assert "rejected" in tool[0]["content"]


async def test_cancel_over_http_ends_the_run(client: Client) -> None:
    key = "http-cancel-" + client.agency
    client.llm.script(key, [ScriptStep(content="slow", delay_ms=5000)])
    thread = await client.thread()
    await client.invoke(thread, key)
    await client.until(thread, lambda s: s["run"]["status"] == "running")
    r = await client.http.post(f"{client.path(thread)}/cancel", json={"reason": "changed my mind"})
    assert r.status_code == 202
    state = await client.until(thread, done, timeout=10)
    assert state["run"]["status"] == "canceled"


async def test_idempotent_and_queued_invokes_over_http(client: Client) -> None:
    key = "http-queue-" + client.agency
    client.llm.script(
        key, [ScriptStep(content="first", delay_ms=200), ScriptStep(content="second")]
    )
    thread = await client.thread()
    r1 = await client.http.post(
        f"{client.path(thread)}/invoke",
        json={"messages": [{"role": "user", "content": key}]},
        headers={"Idempotency-Key": "same-key"},
    )
    r2 = await client.http.post(
        f"{client.path(thread)}/invoke",
        json={"messages": [{"role": "user", "content": key}]},
        headers={"Idempotency-Key": "same-key"},
    )
    assert r1.json()["runId"] == r2.json()["runId"]
    second = await client.invoke(thread, key)
    state = await client.until(thread, lambda s: s["run"]["runId"] == second and done(s))
    assert state["run"]["status"] == "completed"
    r = await client.http.get(f"{client.path(thread)}/events", params={"type": "run.completed"})
    completed = [e["data"]["runId"] for e in r.json()["events"]]
    assert completed == [r1.json()["runId"], second]


async def test_subagent_tree_over_http(client: Client) -> None:
    key = "http-tree-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("task", description=f"one {key}-c", subagentType="worker"),
                               call("task", description=f"two {key}-c", subagentType="worker")]),
        ScriptStep(content="merged"),
    ])  # fmt: skip
    client.llm.script(f"{key}-c", [ScriptStep(content="child report")])
    thread = await client.thread("manager")
    await client.invoke(thread, key)
    state = await client.until(thread, done)
    assert state["run"]["status"] == "completed"
    links = state["state"]["subagents"]
    assert len(links) == 2 and {link["status"] for link in links} == {"completed"}
    assert all(link["report"] == "child report" for link in links)

    r = await client.http.get(f"{client.path(thread)}/tree")
    assert r.status_code == 200, r.text
    tree = r.json()
    assert tree["id"] == thread and len(tree["children"]) == 2
    assert {c["id"] for c in tree["children"]} == {link["childThreadId"] for link in links}


async def test_cost_of_a_run_from_the_price_table_shows_per_run_thread_and_tenant(
    client: Client,
) -> None:
    blueprint = {"name": "priced", "prompt": "You answer.", "model": "openai:gpt-4.1-mini"}
    r = await client.http.post(f"/agency/{client.agency}/blueprints", json=blueprint)
    assert r.status_code == 201, r.text
    key = "http-cost-" + client.agency
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)  # $0.40 + $0.80
    client.llm.script(key, [ScriptStep(content="priced answer", usage=usage)])
    thread = await client.thread("priced")
    run_id = await client.invoke(thread, key)
    state = await client.until(thread, done)
    assert state["run"]["runId"] == run_id and state["run"]["status"] == "completed"

    r = await client.http.get(f"{client.path(thread)}/usage")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["costUsd"] == pytest.approx(1.20) and body["inputTokens"] == 1_000_000
    assert [(x["runId"], x["costUsd"]) for x in body["runs"]] == [(run_id, pytest.approx(1.20))]

    async def tenant_total() -> None:
        rows = (await client.http.get("/usage", params={"groupBy": "model"})).json()["rows"]
        priced = [row for row in rows if "gpt-4.1-mini" in row["model"]]
        assert priced and priced[0]["costUsd"] == pytest.approx(1.20)

    await assert_eventually(tenant_total, timeout=10)
    missing = await client.http.get(f"/agency/{client.agency}/agent/nosuchthread/usage")
    assert missing.status_code == 404


async def test_invoke_answers_the_runs_status(client: Client) -> None:
    key = "http-status-" + client.agency
    client.llm.script(key, [ScriptStep(content="slow", delay_ms=3000), ScriptStep(content="next")])
    thread = await client.thread()
    url = f"{client.path(thread)}/invoke"
    message = {"messages": [{"role": "user", "content": key}]}

    async def answer(body: dict[str, object]) -> dict[str, str]:
        r = await client.http.post(url, json=body)
        assert r.status_code == 202, r.text
        return dict(r.json())

    async def status(body: dict[str, object]) -> tuple[str, str]:
        answered = await answer(body)
        assert "reason" not in answered or answered["status"] == "rejected", answered
        return str(answered["runId"]), str(answered["status"])

    first, started = await status({**message, "idempotencyKey": "first"})
    assert started == "running"
    second, queued = await status({**message, "idempotencyKey": "second"})
    assert queued == "queued" and second != first
    refused = await answer({**message, "strategy": "reject"})
    assert refused["status"] == "rejected"
    assert refused["reason"].startswith(f"run {first} is active"), refused
    assert await status({**message, "idempotencyKey": "first"}) == (first, "running")
    r = await client.http.post(f"{client.path(thread)}/cancel", json={})
    assert r.status_code == 202
