"""A thread with tools, an approval and a subagent, exported from one deployment and
imported into a fresh second one (its own NATS data directory and database): the same
messages, todos, files and run outcomes, and it goes on running there."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import httpx

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.archive.conftest import deployment, nats_in, until_state


def call(name: str, **arguments: object) -> ScriptToolCall:
    return ScriptToolCall(name=name, arguments=arguments)


def done(body: dict[str, Any]) -> bool:
    return body["run"] is not None and body["run"]["status"] in ("completed", "error", "canceled")


async def snapshot(http: httpx.AsyncClient, path: str) -> dict[str, Any]:
    """What a client sees of a thread: its state and its runs."""
    state = (await http.get(f"{path}/state")).json()
    runs = await http.get(f"{path}/runs")
    assert runs.status_code == 200, runs.text
    return {"state": state["state"], "run": state["run"], "runs": runs.json()}


def remapped(value: dict[str, Any], ids: dict[str, str]) -> dict[str, Any]:
    text = json.dumps(value)
    for old, new in ids.items():
        text = text.replace(old, new)
    result: dict[str, Any] = json.loads(text)
    return result


async def test_a_thread_round_trips_into_a_fresh_deployment(
    tmp_path: Path, database_url: str
) -> None:
    key = "archive-trip"
    async with nats_in(tmp_path / "first") as nats, deployment(nats, database_url) as first:
        tenant, api_key = await first.tenant("exporter")
        first.llm.script(key, [
            ScriptStep(tool_calls=[
                call("write_todos", todos=[{"content": "plan", "status": "in_progress"}]),
                call("write_file", path="notes/plan.md", content="# plan\n"),
                call("lookup", word="agent"),
            ]),
            ScriptStep(tool_calls=[call("task", description=f"check {key}-c", subagentType="worker")]),
            ScriptStep(content="all done"),
        ])  # fmt: skip
        first.llm.script(f"{key}-c", [
            ScriptStep(tool_calls=[call("lookup_guarded", word="secret")]),
            ScriptStep(content="child report"),
        ])  # fmt: skip
        async with first.client(api_key) as http:
            r = await http.post("/agencies", json={"name": "travel"})
            agency = r.json()["id"]
            r = await http.post(f"/agency/{agency}/agents", json={"agentType": "manager"})
            thread = r.json()["id"]
            path = f"/agency/{agency}/agent/{thread}"
            r = await http.post(
                f"{path}/invoke", json={"messages": [{"role": "user", "content": key}]}
            )
            assert r.status_code == 202, r.text
            paused = await until_state(http, path, lambda b: bool(b["state"]["subagents"]))
            child = paused["state"]["subagents"][0]["childThreadId"]
            child_path = f"/agency/{agency}/agent/{child}"
            await until_state(http, child_path, lambda b: b["run"]["status"] == "paused")
            r = await http.post(f"{child_path}/approve", json={"approved": True})
            assert r.status_code == 202, r.text
            await until_state(http, path, done)
            before = await snapshot(http, path)
            before_child = await snapshot(http, child_path)
            exported = await http.get(f"{path}/export")
            assert exported.status_code == 200, exported.text
            assert exported.headers["content-type"] == "application/gzip"

    assert before["run"]["status"] == "completed"
    assert before["state"]["todos"] == [{"content": "plan", "status": "in_progress"}]
    assert before["state"]["files"] == {"notes/plan.md": "# plan\n"}
    assert before_child["run"]["status"] == "completed"
    with tarfile.open(fileobj=io.BytesIO(exported.content), mode="r:gz") as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        lines = tar.extractfile("events.jsonl").read().splitlines()  # type: ignore[union-attr]
        assert tar.extractfile(f"files/{thread}/notes/plan.md").read() == b"# plan\n"  # type: ignore[union-attr]
    assert manifest["kind"] == "thread" and manifest["root"] == thread
    assert manifest["tenant_id"] == tenant and manifest["events"] == len(lines)
    kinds = {(a["aggregate"], a["id"]) for a in manifest["aggregates"]}
    assert {("thread", thread), ("thread", child), ("agency", agency), ("tree", thread)} <= kinds
    first_event = json.loads(lines[0])
    assert {"event_id", "tenant_id", "aggregate", "seq", "ts", "type", "payload"} <= set(
        first_event
    )

    async with nats_in(tmp_path / "second") as nats, deployment(nats, database_url) as second:
        other, other_key = await second.tenant("importer")
        assert other != tenant
        async with second.client(other_key) as http:
            r = await http.post(
                "/import", content=exported.content, headers={"Content-Type": "application/gzip"}
            )
            assert r.status_code == 201, r.text
            result = r.json()
            assert result["kind"] == "thread" and result["id"] == thread
            assert result["tenantId"] == other
            ids = result["remapped"]
            new_child = ids[child]
            assert new_child != child and set(result["threads"]) == {thread, new_child}

            after = await until_state(http, path, done)
            assert await snapshot(http, path) == remapped(before, ids)
            assert await snapshot(http, f"/agency/{agency}/agent/{new_child}") == remapped(
                before_child, ids
            )
            assert after["state"]["files"] == {"notes/plan.md": "# plan\n"}

            again = await http.post(
                "/import", content=exported.content, headers={"Content-Type": "application/gzip"}
            )
            assert again.status_code == 409, again.text
            assert "already exists" in again.json()["error"]

            second.llm.script(f"{key}-more", [ScriptStep(content="still here")], count="turn")
            body = {"messages": [{"role": "user", "content": f"{key}-more"}]}
            r = await http.post(f"{path}/invoke", json=body)
            assert r.status_code == 202, r.text
            more = await until_state(
                http, path, lambda b: done(b) and b["run"]["runId"] == r.json()["runId"]
            )
            assert more["state"]["messages"][-1]["content"] == "still here"
            assert more["state"]["todos"] == before["state"]["todos"]
            # The services found nothing to do in what was imported: the child has the
            # events the archive gave it and no more.
            counts = {(a["aggregate"], a["id"]): a["events"] for a in manifest["aggregates"]}
            r = await http.get(f"/agency/{agency}/agent/{new_child}/events", params={"limit": 500})
            assert len(r.json()["events"]) == counts[("thread", child)]
