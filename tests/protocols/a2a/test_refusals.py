"""Bad requests answer the protocol's errors (never a hang or a 500), and a revoked key
ends its open A2A stream."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from a2a.client import A2AClientError

from agency.services.llm.fake_scripts import ScriptStep
from tests.protocols.a2a.conftest import JSONRPC, Tenant
from tests.protocols.a2a.helpers import WAIT, ask


def rpc(method: str, params: Any = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params or {}}


def message(*parts: dict[str, Any], **fields: str) -> dict[str, Any]:
    return {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": list(parts), **fields}}


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        (b"{not json", -32700, "not valid JSON"),
        (rpc("NoSuchMethod"), -32601, "NoSuchMethod"),
        (rpc("SendMessage", {"configuration": {}}), -32602, "message"),
        (rpc("SendMessage", message()), -32602, "at least one part"),
        (rpc("SendMessage", {"message": {**message({"text": "x"})["message"], "messageId": "a b"}}),
         -32602, "messageId"),
        (rpc("SendMessage", {"message": {**message({"text": "x"})["message"], "messageId": "ab\n"}}),
         -32602, "messageId"),
        (rpc("SendMessage", message({"url": "https://x.example/a.png"})), -32005, "files"),
        (rpc("SendMessage", message({"text": "hi"}, taskId="nothing.here")), -32001, "not found"),
        (rpc("GetTask", {"id": "no-dot"}), -32001, "not found"),
        (rpc("ListTasks", {"pageSize": 1000}), -32602, "pageSize"),
        (rpc("CreateTaskPushNotificationConfig", {"taskId": "a.b", "url": "http://h.example/"}),
         -32001, "not found"),
        (rpc("CreateTaskPushNotificationConfig", {"url": "http://h.example/"}), -32602, "taskId"),
        ({"id": 1, "method": "GetTask"}, -32600, "jsonrpc"),
        ({**rpc("GetTask", {"id": "a.b"}), "id": {"bad": 1}}, -32600, "id"),
        (rpc("ListTasks", {"status": "DONE"}), -32602, "TaskState"),
        (rpc("ListTasks", {"statusTimestampAfter": "yesterday"}), -32602, "RFC 3339"),
    ],
    ids=[
        "not-json", "unknown-method", "no-message", "no-parts", "spaced-message-id", "message-id-ending-a-line", "file-part", "unknown-task",
        "malformed-task-id", "page-too-large", "push-config-unknown-task", "push-config-no-task", "not-jsonrpc", "object-id",
        "unknown-status", "bad-timestamp",
    ],
)  # fmt: skip
async def test_a_bad_jsonrpc_request_answers_its_error(
    tenant: Tenant, body: Any, code: int, words: str
) -> None:
    url = tenant.agent_url("worker")
    if isinstance(body, bytes):
        r = await tenant.http.post(url, content=body, headers={"content-type": "application/json"})
    else:
        r = await tenant.http.post(url, json=body)
    assert r.status_code == 200, r.text
    error = r.json()["error"]
    assert error["code"] == code and words in error["message"], error


async def test_an_unsupported_protocol_version_is_refused(tenant: Tenant) -> None:
    r = await tenant.http.post(
        tenant.agent_url("worker"),
        json=rpc("GetTask", {"id": "a.b"}),
        headers={"A2A-Version": "0.3"},
    )
    assert r.json()["error"]["code"] == -32009


async def test_http_json_errors_are_statuses_with_their_reason(tenant: Tenant) -> None:
    r = await tenant.http.get(f"{tenant.agent_url('worker')}/tasks/nothing.here")
    assert r.status_code == 404
    (info,) = r.json()["error"]["details"]
    assert info["reason"] == "TASK_NOT_FOUND"
    r = await tenant.http.post(f"{tenant.agent_url('worker')}/message:send", content=b"[")
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = await tenant.http.get(f"{tenant.agent_url('worker')}/tasks?pageSize=many")
    assert r.status_code == 400


async def test_a_revoked_key_ends_its_open_stream(tenant: Tenant) -> None:
    r = await tenant.http.post(f"{tenant.url}/keys", json={"name": "a2a-stream"})
    assert r.status_code == 201, r.text
    key_id, key = r.json()["keyId"], r.json()["apiKey"]
    text = f"a2a-revoke-{tenant.agency}"
    tenant.llm.script(text, [ScriptStep(content="held")])
    release = tenant.llm.hold(text)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
            other = Tenant(tenant.url, tenant.llm, key, tenant.id, tenant.agency, http)
            async with other.client("worker", JSONRPC) as client:
                events = client.send_message(ask(text))
                async with asyncio.timeout(WAIT):
                    first = await anext(events)
                    assert first.HasField("task")
                    r = await tenant.http.delete(f"{tenant.url}/keys/{key_id}")
                    assert r.status_code == 204, r.text
                    with pytest.raises(A2AClientError, match="revoked"):
                        async for _ in events:
                            pass
    finally:
        release.set()


async def test_a_streaming_methods_error_is_the_one_event_of_its_stream(tenant: Tenant) -> None:
    r = await tenant.http.post(
        tenant.agent_url("worker"), json=rpc("SubscribeToTask", {"id": "nothing.here"})
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    (frame,) = [f for f in r.text.split("\n\n") if f]
    event, data = frame.split("\n")
    assert event == "event: error"
    assert json.loads(data.removeprefix("data: "))["error"]["code"] == -32001
