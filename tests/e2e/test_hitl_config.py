"""A blueprint that lists tools in `hitl.tools` gets human approval for them, tag or not."""

from __future__ import annotations

from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.e2e.test_http_runs import call, done


async def test_a_blueprint_with_hitl_config_and_no_hitl_tag_pauses_for_approval(
    client: Client,
) -> None:
    r = await client.http.post(
        f"/agency/{client.agency}/blueprints",
        json={"name": "careful", "prompt": "Look words up.", "tags": ["default", "lookup"],
              "config": {"hitl": {"tools": ["lookup"]}}},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    key = "config-hitl-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("lookup", word="risky")]),
        ScriptStep(content="looked up after approval"),
    ])  # fmt: skip
    thread = await client.thread("careful")
    await client.invoke(thread, key)
    paused = await client.until(thread, lambda s: s["run"]["status"] in ("paused", "completed"))
    assert (paused["run"]["status"], paused["run"]["reason"]) == ("paused", "hitl")
    (pending,) = paused["state"]["pendingToolCalls"]
    assert pending["name"] == "lookup" and pending["args"] == {"word": "risky"}
    assert not [m for m in paused["state"]["messages"] if m["role"] == "tool"]

    r = await client.http.post(f"{client.path(thread)}/approve", json={"approved": True})
    assert r.status_code == 202, r.text
    state = await client.until(thread, done)
    assert state["run"]["status"] == "completed"
    (tool,) = [m for m in state["state"]["messages"] if m["role"] == "tool"]
    assert tool["content"] == "definition of risky"
