"""Agent runs driven over HTTP, observed through `/state`, `/events` and `/tree`."""

from __future__ import annotations

from typing import Any

from services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client


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
    outputs = [e["payload"]["output"] for e in r.json()["events"]]
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
    completed = [e["payload"]["run_id"] for e in r.json()["events"]]
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
