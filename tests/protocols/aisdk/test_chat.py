"""The AI SDK's chat (`ai`'s `AbstractChat` and `DefaultChatTransport`, in node) against
`/aisdk/{agency}/{blueprint}/chat`: text, tool calls, approvals, a cut stream resumed, and
what is refused."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agency.contracts.events import RequestRejected
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext
from agency.services.api.idempotency import run_id_for
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.tenancy.fairness import ACTIVE_RUN_LIMIT
from tests.cutting_proxy import Proxy
from tests.langgraph.conftest import new_tenant
from tests.protocols.aisdk.conftest import Tenant


def _call(tool: str) -> ScriptToolCall:
    return ScriptToolCall(name=tool, arguments={"word": "w"})


def _assistant(out: dict[str, Any]) -> dict[str, Any]:
    message = out["messages"][-1]
    assert message["role"] == "assistant", out
    return dict(message)


def _texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


def _tools(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"].startswith("tool-")]


async def test_a_user_message_streams_the_answer_into_the_assistant_message(
    tenant: Tenant,
) -> None:
    key = f"aisdk-text-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="Hello from the agent", stream_delay_ms=20)])
    out = await tenant.node("send", text=key)
    assert out["status"] == "ready" and out["errors"] == [], out
    user, answer = out["messages"]
    assert user["role"] == "user" and answer["role"] == "assistant"
    assert answer["id"].startswith("run_")
    assert _texts(answer) == ["Hello from the agent"]
    assert answer["parts"][0]["type"] == "step-start"
    assert all(p.get("state", "done") == "done" for p in answer["parts"] if p["type"] == "text")


async def test_the_answer_is_a_ui_message_stream_ending_with_done(tenant: Tenant) -> None:
    key = f"aisdk-wire-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="wire")])
    body = {
        "id": f"chat-{tenant.agency}",
        "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": key}]}],
        "trigger": "submit-message",
    }
    async with tenant.http.stream("POST", f"/aisdk/{tenant.agency}/worker/chat", json=body) as r:
        assert r.status_code == 200
        assert r.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[0].startswith('data: {"type":"start","messageId":"run_')
    assert lines[-2] == 'data: {"type":"finish","finishReason":"stop"}'
    assert lines[-1] == "data: [DONE]"


async def test_a_tool_call_and_its_output_are_a_tool_part(tenant: Tenant) -> None:
    key = f"aisdk-tool-{tenant.agency}"
    tenant.llm.script(
        key,
        [ScriptStep(tool_calls=(_call("lookup"),)), ScriptStep(content="it means w")],
    )
    out = await tenant.node("send", text=key)
    assert out["status"] == "ready" and out["errors"] == [], out
    answer = _assistant(out)
    (tool,) = _tools(answer)
    assert tool["type"] == "tool-lookup" and tool["state"] == "output-available"
    assert tool["input"] == {"word": "w"} and tool["output"] == "definition of w"
    assert _texts(answer) == ["it means w"]
    # Two model calls: two steps in the one message.
    assert [p["type"] for p in answer["parts"]].count("step-start") == 2


async def test_an_approval_round_trip_runs_the_call_in_the_same_message(tenant: Tenant) -> None:
    key = f"aisdk-approve-{tenant.agency}"
    tenant.llm.script(
        key,
        [ScriptStep(tool_calls=(_call("lookup_guarded"),)), ScriptStep(content="approved")],
    )
    out = await tenant.node("approve", text=key, approved=True)
    assert out["errors"] == [], out
    (paused_tool,) = _tools(out["paused"][-1])
    assert paused_tool["state"] == "approval-requested"
    assert paused_tool["input"] == {"word": "w"}
    answer = _assistant(out)
    assert answer["id"] == out["paused"][-1]["id"]  # the run's one message, continued
    (tool,) = _tools(answer)
    assert tool["state"] == "output-available"
    assert tool["output"] == "guarded definition of w"
    assert _texts(answer) == ["approved"]
    assert len(out["messages"]) == 2


async def test_a_rejected_approval_denies_the_call(tenant: Tenant) -> None:
    key = f"aisdk-reject-{tenant.agency}"
    tenant.llm.script(
        key,
        [ScriptStep(tool_calls=(_call("lookup_guarded"),)), ScriptStep(content="fine")],
    )
    out = await tenant.node("approve", text=key, approved=False, reason="not now")
    assert out["errors"] == [], out
    answer = _assistant(out)
    (tool,) = _tools(answer)
    assert tool["state"] == "output-denied"
    assert _texts(answer) == ["fine"]


async def test_a_cut_stream_resumed_gives_the_whole_message(tenant: Tenant) -> None:
    key = f"aisdk-cut-{tenant.agency}"
    words = " ".join(f"word{i}" for i in range(30))
    tenant.llm.script(key, [ScriptStep(content=words, stream_delay_ms=60)])
    async with Proxy(tenant.url, cut_after=4, cuts=1) as proxy:
        out = await tenant.node("cut", api=tenant.chat_url(base=proxy.url), text=key)
        assert proxy.cut == 1
        streams = [s.path for s in proxy.streams()]
    assert streams == [f"/aisdk/{tenant.agency}/worker/chat/{out['id']}/stream"]
    before = out["before"][-1]
    assert before["role"] == "assistant" and "".join(_texts(before)) != words
    answer = _assistant(out)
    assert answer["id"] == before["id"]
    assert _texts(answer) == [words]
    assert len(out["messages"]) == 2
    # Once the run is over, nothing is under way: 204, nothing to resume.
    idle = await tenant.node("idle", chatId=out["id"])
    assert idle == {"stream": None}


async def test_the_resume_route_replays_an_active_run_from_its_start(tenant: Tenant) -> None:
    key = f"aisdk-replay-{tenant.agency}"
    tenant.llm.script(
        key, [ScriptStep(tool_calls=(_call("lookup_guarded"),)), ScriptStep(content="x")]
    )
    sent = await tenant.node("send", text=key)
    # The run waits for the approval: it is the chat's active run, its message replayed.
    out = await tenant.node("reconnect", chatId=sent["id"])
    types = [c["type"] for c in out["chunks"]]
    assert types[0] == "start" and types[-1] == "finish"
    assert out["chunks"][0]["messageId"] == _assistant(sent)["id"]
    assert "tool-approval-request" in types and "tool-input-available" in types


async def test_another_tenants_chat_is_not_found(tenant: Tenant, aisdk_system: Any) -> None:
    key = f"aisdk-mine-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="mine")])
    mine = await tenant.node("send", text=key)
    other_key, _, other_agency = await new_tenant(tenant.url, "aisdk-other")
    # The other tenant at this tenant's chat route: the agency is not theirs.
    out = await tenant.node("refused", key=other_key, text="hi", reconnect=mine["id"])
    assert out["status"] == "error"
    assert any("not found" in e for e in out["errors"]), out
    assert "not found" in out["reconnect"]
    r = await tenant.http.get(
        f"/aisdk/{tenant.agency}/worker/chat/{mine['id']}/stream",
        headers={"Authorization": f"Bearer {other_key}"},
    )
    assert r.status_code == 404 and "not found" in r.json()["error"]
    # Nor under their own agency: the chat id names nothing of theirs.
    r = await tenant.http.get(
        f"/aisdk/{other_agency}/worker/chat/{mine['id']}/stream",
        headers={"Authorization": f"Bearer {other_key}"},
    )
    assert r.status_code == 404


async def test_bad_bodies_are_refused_with_a_message(tenant: Tenant) -> None:
    path = f"/aisdk/{tenant.agency}/worker/chat"
    user = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    cases: list[tuple[Any, str]] = [
        ({}, "id"),
        ({"id": "c1", "messages": []}, "messages"),
        ({"id": "c1", "messages": [{"id": "a", "role": "robot", "parts": []}]}, "role"),
        ({"id": "c1", "messages": [user], "trigger": "regenerate-message"}, "regenerate"),
        (
            {"id": "c1", "messages": [{"id": "a", "role": "assistant", "parts": []}]},
            "last message",
        ),
        ({"id": "c1", "messages": [{**user, "parts": [{"type": "file"}]}]}, "no text"),
        ({"id": "a.b", "messages": [user]}, "chat id"),
    ]
    for body, said in cases:
        r = await tenant.http.post(path, json=body)
        assert r.status_code == 400, (body, r.text)
        assert said in r.json()["error"], (body, r.text)
    r = await tenant.http.post(
        f"/aisdk/{tenant.agency}/nobody/chat", json={"id": "c", "messages": [user]}
    )
    assert r.status_code == 404
    # The SDK's transport shows the API's message when a body is refused.
    out = await tenant.node("refused", body={"id": "c2", "messages": []})
    assert out["status"] == "error" and any("messages" in e for e in out["errors"]), out


async def test_a_run_error_is_the_chats_error(tenant: Tenant) -> None:
    key = f"aisdk-error-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(status=400, times=5)])
    out = await tenant.node("send", text=key)
    assert out["status"] == "error", out
    (error,) = out["errors"]
    assert "http_4xx" in error or "400" in error, error


async def test_a_new_message_withdraws_the_approval_the_chat_awaits(tenant: Tenant) -> None:
    key, then = f"aisdk-withdraw-{tenant.agency}", f"aisdk-instead-{tenant.agency}"
    # The second run's model call sees the whole thread, the first message's key too.
    tenant.llm.script(
        key,
        [ScriptStep(tool_calls=(_call("lookup_guarded"),)), ScriptStep(content="something else")],
    )
    chat = f"withdraw-{tenant.agency}"
    path = f"/aisdk/{tenant.agency}/worker/chat"

    def user(mid: str, text: str) -> dict[str, Any]:
        return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}

    first = await tenant.http.post(path, json={"id": chat, "messages": [user("u1", key)]})
    assert '"tool-approval-request"' in first.text and '"tool-calls"' in first.text
    body = {"id": chat, "messages": [user("u1", key), user("u2", then)]}
    second = await tenant.http.post(path, json=body)
    assert second.status_code == 200
    chunks = [json.loads(line[6:]) for line in second.text.splitlines() if line[6:7] == "{"]
    assert "".join(c["delta"] for c in chunks if c["type"] == "text-delta") == "something else"
    assert chunks[0]["messageId"] != json.loads(first.text.splitlines()[0][6:])["messageId"]
    assert second.text.endswith("data: [DONE]\n\n")
    # Posted again, the same message is the same run: its message replayed, no new run.
    again = await tenant.http.post(path, json=body)
    assert again.text == second.text
    # Nothing under way any more.
    r = await tenant.http.get(f"{path}/{chat}/stream")
    assert r.status_code == 204 and r.content == b""


def _user(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


async def _answered_once(tenant: Tenant, chat: str, key: str) -> str:
    """The chat, its first message `u1` (the script's `key`) answered; its route."""
    path = f"/aisdk/{tenant.agency}/worker/chat"
    r = await tenant.http.post(path, json={"id": chat, "messages": [_user("u1", key)]})
    assert r.status_code == 200 and '"finish"' in r.text, r.text
    return path


async def _refused(tenant: Tenant, bus: Bus, chat: str, message_id: str, reason: str) -> str:
    """What the runtime stores when it refuses a message's run; the run's id."""
    run_id = run_id_for(tenant.id, chat, hashlib.sha256(message_id.encode()).hexdigest()[:40])
    position = await bus.store.last_position(tenant.id, "thread", chat)
    await bus.store.append(
        tenant.id, "thread", chat,
        [RequestRejected(run_id=run_id, idempotency_key=f"{chat}:{message_id}", reason=reason)],
        expected=position, context=EventContext(agency_id=tenant.agency, thread_id=chat),
    )  # fmt: skip
    return run_id


async def test_a_message_the_runtime_refused_for_a_limit_runs_when_sent_again(
    tenant: Tenant, bus: Bus
) -> None:
    """The door's count lagged and the runtime refused a message's run for the tenant's
    limits (the chat was answered 429). The chat sends the same message again, its id
    unchanged, as a client told to retry does: it runs, where the refused run was
    replayed before."""
    first, then = f"aisdk-first-{tenant.agency}", f"aisdk-retried-{tenant.agency}"
    # The second run's model call sees the whole thread, the first message's key too.
    tenant.llm.script(
        first, [ScriptStep(content="first answer"), ScriptStep(content="ran at last")]
    )
    chat = f"retried-{tenant.agency}"
    path = await _answered_once(tenant, chat, first)
    reason = f"{ACTIVE_RUN_LIMIT}: the tenant has 1 active runs, its limit is 1; retry in 1 s"
    refused = await _refused(tenant, bus, chat, "u2", reason)

    body = {"id": chat, "messages": [_user("u1", first), _user("u2", then)]}
    again = await tenant.http.post(path, json=body)
    assert again.status_code == 200, again.text
    chunks = [json.loads(line[6:]) for line in again.text.splitlines() if line[6:7] == "{"]
    assert chunks[0]["type"] == "start" and chunks[0]["messageId"] != refused, chunks
    said = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert said == "ran at last", chunks


async def test_a_message_sent_again_after_its_run_was_refused_ends_with_the_refusal(
    tenant: Tenant, bus: Bus
) -> None:
    """A refusal that binds its message (here the thread's run was busy and the message
    asked to be refused): the same message again is answered the refusal, and its stream
    ends."""
    first = f"aisdk-busy-{tenant.agency}"
    tenant.llm.script(first, [ScriptStep(content="first answer")])
    chat = f"busy-{tenant.agency}"
    path = await _answered_once(tenant, chat, first)
    reason = "run run_X is active and the request asked to be rejected"
    refused = await _refused(tenant, bus, chat, "u2", reason)

    body = {"id": chat, "messages": [_user("u1", first), _user("u2", "again")]}
    again = await tenant.http.post(path, json=body)
    assert again.status_code == 200, again.text
    chunks = [json.loads(line[6:]) for line in again.text.splitlines() if line[6:7] == "{"]
    assert chunks[0] == {"type": "start", "messageId": refused}, chunks
    assert chunks[-1] == {"type": "error", "errorText": reason}, chunks
    assert again.text.rstrip().endswith("data: [DONE]")
