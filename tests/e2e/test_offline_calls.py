"""The offline model calls the tools a user message asks for (`CALL tool {args}`), through
the whole system: approval included, with no script and no provider key."""

from __future__ import annotations

import httpx
import msgspec

from agency.services.testing import ScriptedModel, call, reply
from tests.e2e.conftest import Client
from tests.e2e.test_http_runs import done


async def test_a_call_asked_of_the_offline_model_waits_for_approval_then_runs(
    client: Client,
) -> None:
    r = await client.http.post(
        f"/agency/{client.agency}/blueprints",
        json={"name": "careful", "prompt": "Look words up.", "tags": ["lookup"],
              "config": {"hitl": {"tools": ["lookup"]}}},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    thread = await client.thread("careful")
    await client.invoke(thread, 'Please look this up.\nCALL lookup {"word": "risky"}')
    paused = await client.until(thread, lambda s: s["run"]["status"] in ("paused", "completed"))
    assert (paused["run"]["status"], paused["run"]["reason"]) == ("paused", "hitl")
    (pending,) = paused["state"]["pendingToolCalls"]
    assert pending["name"] == "lookup" and pending["args"] == {"word": "risky"}

    r = await client.http.post(f"{client.path(thread)}/approve", json={"approved": True})
    assert r.status_code == 202, r.text
    state = await client.until(thread, done)
    assert state["run"]["status"] == "completed"
    (tool,) = [m for m in state["state"]["messages"] if m["role"] == "tool"]
    assert tool["content"] == "definition of risky"
    assert state["state"]["messages"][-1]["content"] == "Done. lookup answered: definition of risky"


async def test_a_call_of_a_tool_not_offered_is_answered_in_text_listing_the_offered(
    client: Client,
) -> None:
    r = await client.http.post(
        f"/agency/{client.agency}/blueprints",
        json={"name": "plain", "prompt": "Look words up.", "tags": ["lookup"]},
    )
    assert r.status_code == 201, r.text
    thread = await client.thread("plain")
    await client.invoke(thread, 'CALL send_email {"to": "x@example.com"}')
    state = await client.until(thread, done)
    assert state["run"]["status"] == "completed"
    answer = state["state"]["messages"][-1]["content"]
    assert "send_email: it is not offered" in answer and "lookup" in answer, answer
    assert not [m for m in state["state"]["messages"] if m["role"] == "tool"]


async def test_a_scripted_model_posted_to_the_fake_drives_a_run_of_the_system(
    client: Client,
) -> None:
    key = "scripted-" + client.agency
    model = ScriptedModel([call("lookup", word="kit"), reply("Looked it up.")])
    root = client.llm.base_url.removesuffix("/v1")
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            f"{root}/_scripts", content=msgspec.json.encode(model.as_fake_script(key))
        )
    assert r.status_code == 204, r.text
    thread = await client.thread("worker")
    for _ in range(2):  # counted per turn: the second message is answered by step 0 again
        run = await client.invoke(thread, f"{key}: look it up")
        state = await client.until(thread, lambda s, run=run: s["run"]["runId"] == run and done(s))
        assert state["run"]["status"] == "completed"
        assert state["state"]["messages"][-1]["content"] == "Looked it up."
    tools = [m["content"] for m in state["state"]["messages"] if m["role"] == "tool"]
    assert tools == ["definition of kit", "definition of kit"]
