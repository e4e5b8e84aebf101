"""The chat's stream beyond one run's text: a subagent as a data part, and a revoked key
cutting an open chat stream like the API's other streams (the run going on, resumable)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from httpx_sse import aconnect_sse

from agency.services.api.revocation import CUT_SECONDS
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.protocols.aisdk.conftest import Tenant

WAIT = 20.0


async def test_a_subagent_is_a_data_part_and_its_call_a_tool_part(tenant: Tenant) -> None:
    key, child = f"aisdk-manager-{tenant.agency}", f"aisdk-child-{tenant.agency}"
    task = ScriptToolCall(name="task", arguments={"description": child, "subagentType": "worker"})
    tenant.llm.script(key, [ScriptStep(tool_calls=(task,)), ScriptStep(content="delegated")])
    tenant.llm.script(child, [ScriptStep(content="the child's part")])
    out = await tenant.node("send", api=tenant.chat_url("manager"), text=key)
    assert out["status"] == "ready" and out["errors"] == [], out
    answer = out["messages"][-1]
    (spawned,) = [p for p in answer["parts"] if p["type"] == "data-subagent"]
    assert spawned["data"]["status"] == "completed"
    assert spawned["data"]["subagentType"] == "worker" and spawned["data"]["threadId"]
    (call,) = [p for p in answer["parts"] if p["type"] == "tool-task"]
    assert call["state"] == "output-available" and "the child's part" in str(call["output"])
    assert [p["text"] for p in answer["parts"] if p["type"] == "text"] == ["delegated"]


async def test_a_revoked_key_cuts_its_chat_stream_while_the_run_goes_on(tenant: Tenant) -> None:
    """Cut with the revoked key, resumed with a live one; a second message meanwhile is
    refused; canceled, the message ends with `abort`."""
    r = await tenant.http.post("/keys", json={"name": "chat"})
    assert r.status_code == 201, r.text
    key_id, key = r.json()["keyId"], r.json()["apiKey"]
    text = f"aisdk-slow-{tenant.agency}"
    tenant.llm.script(text, [ScriptStep(content="word ", repeat=400, stream_delay_ms=40)])
    body: dict[str, Any] = {
        "id": f"slow-{tenant.agency}",
        "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": text}]}],
    }
    path = f"/aisdk/{tenant.agency}/worker/chat"
    loop = asyncio.get_running_loop()
    after: list[tuple[str, str]] = []
    headers = {"Authorization": f"Bearer {key}"}
    async with aconnect_sse(tenant.http, "POST", path, json=body, headers=headers) as source:
        assert source.response.status_code == 200
        frames = source.aiter_sse()
        async with asyncio.timeout(WAIT):
            while json.loads((await anext(frames)).data)["type"] != "text-delta":
                pass
        r = await tenant.http.delete(f"/keys/{key_id}")
        assert r.status_code == 204, r.text
        revoked_at = loop.time()
        async with asyncio.timeout(CUT_SECONDS + 1.0):
            after = [(sse.event, sse.data) async for sse in frames]
        ended_in = loop.time() - revoked_at
    assert ended_in <= CUT_SECONDS
    event, data = after[-1]
    assert event == "error" and json.loads(data)["error"] == "api_key_revoked"
    # Cut long before the run's 400 words are streamed (its end is read below).
    assert len(after) < 100, after
    r = await tenant.http.get(f"{path}/{body['id']}/stream", headers=headers)
    assert r.status_code == 401
    # The run went on: the owner's live key resumes its message, to its end.
    chunks: list[dict[str, Any]] = []
    async with (
        aconnect_sse(tenant.http, "GET", f"{path}/{body['id']}/stream") as source,
        asyncio.timeout(WAIT),
    ):
        frames = source.aiter_sse()
        chunks.append(json.loads((await anext(frames)).data))
        assert chunks[0]["type"] == "start" and chunks[0]["messageId"].startswith("run_")
        # Another message while that run is under way is refused, saying what to do.
        more = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "and more"}]}
        busy = {**body, "messages": [*body["messages"], more]}
        r = await tenant.http.post(path, json=busy)
        assert r.status_code == 409 and "resume its stream" in r.json()["error"], r.text
        # Canceled, the run's message ends with `abort`.
        thread = f"/agency/{tenant.agency}/agent/{body['id']}"
        r = await tenant.http.post(f"{thread}/cancel", json={"reason": "enough"})
        assert r.status_code == 202, r.text
        async for sse in frames:
            chunks.append(json.loads(sse.data) if sse.data != "[DONE]" else {"type": "[DONE]"})
    assert [c["type"] for c in chunks[-2:]] == ["abort", "[DONE]"]
    assert chunks[-2]["reason"] == "enough"
