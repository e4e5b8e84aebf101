"""Revoking an API key cuts every stream it opened, on every API process, within
`CUT_SECONDS`: the native SSE and WebSocket streams, LangGraph's run, join and thread
streams, and an MCP tool call's stream, while a slow model keeps the thread busy."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.services.api.revocation import CUT_SECONDS, WS_REVOKED
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, running_apis
from tests.helpers import assert_eventually, created_tenant

# The model streams a word every 40 ms for about 16 s: events all through each test.
WORDS = 400
WORD_MS = 40
WAIT = 20.0


@dataclass(frozen=True)
class System:
    urls: list[str]
    llm: FakeLLMServer


@dataclass(frozen=True)
class Tenant:
    """A tenant with an agency, its own key (`auth`) and a key to revoke (`key`)."""

    system: System
    admin_key: str
    agency: str
    key_id: str
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


# One system per module: its services share the session's durable consumers.
@pytest.fixture(scope="module")
async def system(
    nats_url: str, database_url: str, bus: Bus, nats_server: NatsServer | None
) -> AsyncIterator[System]:
    async with (
        FakeLLMServer(instant=True, latency_ms=(20, 80)) as llm,
        running_apis(nats_url, database_url, nats_server, llm, apis=2) as urls,
    ):
        yield System(urls=urls, llm=llm)


@pytest.fixture
async def tenant(system: System) -> Tenant:
    async with httpx.AsyncClient(base_url=system.urls[0], timeout=WAIT) as http:
        # On a loaded machine a create may answer 202: its key and agency are waited for.
        admin_key, _, agency = await created_tenant(http, ADMIN, "revoked", "default")
        assert agency is not None
        own = {"Authorization": f"Bearer {admin_key}"}
        key = await http.post("/keys", json={"name": "streams"}, headers=own)
        assert key.status_code in (201, 202), key.text

        async def usable() -> None:
            auth = {"Authorization": f"Bearer {key.json()['apiKey']}"}
            assert (await http.get("/agencies", headers=auth)).status_code == 200

        await assert_eventually(usable, timeout=60, interval=0.2)
    return Tenant(
        system=system,
        admin_key=admin_key,
        agency=agency,
        key_id=key.json()["keyId"],
        key=key.json()["apiKey"],
    )


def slow_answer(system: System, text: str) -> None:
    """Requests mentioning `text` are answered a word at a time, for about 16 s."""
    step = ScriptStep(content="word ", repeat=WORDS, stream_delay_ms=WORD_MS)
    system.llm.script(text, [step])


async def busy_thread(tenant: Tenant) -> tuple[str, str]:
    """A thread whose run streams the slow answer: (thread id, run id)."""
    text = f"slow {tenant.key_id}"
    slow_answer(tenant.system, text)
    async with httpx.AsyncClient(base_url=tenant.system.urls[0], timeout=WAIT) as http:
        path = f"/agency/{tenant.agency}/agents"
        r = await http.post(path, json={"agentType": "worker"}, headers=tenant.auth)
        assert r.status_code == 201, r.text
        thread = r.json()["id"]
        body = {"messages": [{"role": "user", "content": text}]}
        path = f"/agency/{tenant.agency}/agent/{thread}/invoke"
        r = await http.post(path, json=body, headers=tenant.auth)
        assert r.status_code == 202, r.text
        return thread, r.json()["runId"]


async def revoke(tenant: Tenant, *, rotate: bool = False) -> float:
    """Revoke the key on the first API process (the streams are on the second); the loop
    time the revocation was answered."""
    async with httpx.AsyncClient(base_url=tenant.system.urls[0], timeout=WAIT) as http:
        if rotate:
            r = await http.post(f"/keys/{tenant.key_id}/rotate", headers=tenant.auth)
            assert r.status_code == 201, r.text
        else:
            r = await http.delete(f"/keys/{tenant.key_id}", headers=tenant.auth)
            assert r.status_code == 204, r.text
    return asyncio.get_running_loop().time()


async def cut_sse(
    tenant: Tenant,
    open_stream: Callable[[httpx.AsyncClient], Any],
    *,
    live: Callable[[ServerSentEvent], bool],
    rotate: bool = False,
    seen: list[ServerSentEvent] | None = None,
) -> list[ServerSentEvent]:
    """Open an SSE stream on the second API process, wait for a live frame, revoke the key
    on the first and wait (bounded) for the stream to end: the frames received after the
    revocation was answered (`seen` gets the live frame)."""
    seen = [] if seen is None else seen
    loop = asyncio.get_running_loop()
    after: list[ServerSentEvent] = []
    async with (
        httpx.AsyncClient(base_url=tenant.system.urls[1], timeout=WAIT) as http,
        open_stream(http) as source,
    ):
        assert source.response.status_code == 200, await source.response.aread()
        frames = source.aiter_sse()
        async with asyncio.timeout(WAIT):
            while not live(sse := await anext(frames)):
                pass
        seen.append(sse)
        revoked_at = await revoke(tenant, rotate=rotate)
        async with asyncio.timeout(CUT_SECONDS + 1.0):
            async for sse in frames:
                after.append(sse)
        ended_in = loop.time() - revoked_at
    assert ended_in <= CUT_SECONDS, f"the stream ended {ended_in:.2f}s after the revocation"
    return after


def only_the_revocation(after: list[ServerSentEvent]) -> None:
    """Past the revocation, at most what was already on its way, then the frame saying why
    the stream ends. The model streams 25 words a second, so a stream that was not cut
    would carry some 50 frames in the bound."""
    assert after, "no frame said why the stream ended"
    last = after[-1]
    assert last.event == "error", last
    assert json.loads(last.data)["error"] == "api_key_revoked"
    assert len(after) <= 5, f"{len(after) - 1} frames after the revocation"


async def refused(tenant: Tenant, path: str) -> None:
    async with httpx.AsyncClient(base_url=tenant.system.urls[1], timeout=WAIT) as http:
        r = await http.get(path, headers=tenant.bearer)
        assert r.status_code == 401, r.text


async def goes_on(tenant: Tenant, thread: str, after: ServerSentEvent, frames: int = 20) -> None:
    """The thread went on after the cut: its owner's stream, from the cut one's last live
    frame, carries `frames` more deltas (bounded) that the cut one never got."""
    path = f"/agency/{tenant.agency}/agent/{thread}/stream"
    count = 0
    headers = {**tenant.auth, "Last-Event-ID": after.id}
    async with (
        httpx.AsyncClient(base_url=tenant.system.urls[1], timeout=WAIT) as http,
        aconnect_sse(http, "GET", path, headers=headers) as source,
        asyncio.timeout(WAIT),
    ):
        async for sse in source.aiter_sse():
            count += a_delta(sse)
            if count >= frames:
                return


def stream_of(method: str, path: str, **kwargs: Any) -> Callable[[httpx.AsyncClient], Any]:
    def open_stream(http: httpx.AsyncClient) -> Any:
        return aconnect_sse(http, method, path, **kwargs)

    return open_stream


def a_delta(sse: ServerSentEvent) -> bool:
    return "model.delta" in sse.data


async def test_deleting_a_key_cuts_its_thread_stream_on_another_process(tenant: Tenant) -> None:
    thread, _ = await busy_thread(tenant)
    path = f"/agency/{tenant.agency}/agent/{thread}/stream"
    seen: list[ServerSentEvent] = []
    opened = stream_of("GET", path, headers=tenant.bearer)
    after = await cut_sse(tenant, opened, live=a_delta, seen=seen)
    only_the_revocation(after)
    await refused(tenant, path)
    await goes_on(tenant, thread, seen[-1], frames=len(after) + 20)


async def test_rotating_a_key_cuts_the_old_keys_stream(tenant: Tenant) -> None:
    thread, _ = await busy_thread(tenant)
    path = f"/agency/{tenant.agency}/agent/{thread}/stream"
    opened = stream_of("GET", path, params={"access_token": tenant.key})
    only_the_revocation(await cut_sse(tenant, opened, live=a_delta, rotate=True))
    await refused(tenant, path)


async def test_deleting_a_key_closes_its_websocket_with_4401(tenant: Tenant) -> None:
    thread, _ = await busy_thread(tenant)
    base = tenant.system.urls[1].replace("http://", "ws://")
    url = f"{base}/agency/{tenant.agency}/agent/{thread}/ws"
    loop = asyncio.get_running_loop()
    after: list[str | bytes] = []
    async with connect(url, additional_headers=tenant.bearer, open_timeout=WAIT) as ws:
        async with asyncio.timeout(WAIT):
            while "model.delta" not in str(await ws.recv()):
                pass
        revoked_at = await revoke(tenant)
        async with asyncio.timeout(CUT_SECONDS + 1.0):
            with contextlib.suppress(ConnectionClosed):
                while True:
                    after.append(await ws.recv())
        ended_in = loop.time() - revoked_at
    assert ended_in <= CUT_SECONDS, f"the socket closed {ended_in:.2f}s after the revocation"
    assert ws.close_code == WS_REVOKED and "revoked" in (ws.close_reason or "")
    assert len(after) <= 5, f"{len(after)} messages after the revocation"
    with pytest.raises(InvalidStatus) as again:
        async with connect(url, additional_headers=tenant.bearer, open_timeout=WAIT):
            pass
    assert again.value.response.status_code == 401


@asynccontextmanager
async def langgraph(tenant: Tenant) -> AsyncIterator[tuple[LangGraphClient, str]]:
    """The SDK as the tenant's own key, and a new thread of the `worker` graph."""
    url = f"{tenant.system.urls[0]}/langgraph"
    async with get_client(url=url, api_key=tenant.admin_key, timeout=WAIT) as client:
        thread = await client.threads.create(graph_id="worker")
        yield client, thread["thread_id"]


def lg_input(tenant: Tenant) -> dict[str, Any]:
    text = f"slow lg {tenant.key_id}"
    slow_answer(tenant.system, text)
    return {"messages": [{"role": "user", "content": text}]}


def a_message_part(sse: ServerSentEvent) -> bool:
    return sse.event.startswith("messages")


async def test_deleting_a_key_cuts_a_langgraph_run_stream(tenant: Tenant) -> None:
    async with langgraph(tenant) as (_, thread):
        body = {
            "assistant_id": "worker",
            "input": lg_input(tenant),
            "stream_mode": ["messages-tuple"],
        }
        path = f"/langgraph/threads/{thread}/runs/stream"
        opened = stream_of("POST", path, json=body, headers={"x-api-key": tenant.key})
        only_the_revocation(await cut_sse(tenant, opened, live=a_message_part))


async def test_deleting_a_key_cuts_a_langgraph_join_stream(tenant: Tenant) -> None:
    async with langgraph(tenant) as (client, thread):
        run = await client.runs.create(
            thread, "worker", input=lg_input(tenant), stream_mode=["messages-tuple"]
        )
        path = f"/langgraph/threads/{thread}/runs/{run['run_id']}/stream"
        params = {"stream_mode": "messages-tuple"}
        opened = stream_of("GET", path, params=params, headers={"x-api-key": tenant.key})
        only_the_revocation(await cut_sse(tenant, opened, live=a_message_part))


async def test_deleting_a_key_cuts_a_langgraph_thread_stream(tenant: Tenant) -> None:
    async with langgraph(tenant) as (client, thread):
        await client.runs.create(
            thread, "worker", input=lg_input(tenant), stream_mode=["messages-tuple"]
        )
        path = f"/langgraph/threads/{thread}/stream"
        opened = stream_of("GET", path, headers={"x-api-key": tenant.key})
        only_the_revocation(await cut_sse(tenant, opened, live=a_message_part))


async def test_deleting_a_key_cuts_an_mcp_tool_calls_stream(tenant: Tenant) -> None:
    thread, _ = await busy_thread(tenant)
    text = f"slow mcp {tenant.key_id}"
    slow_answer(tenant.system, text)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "invoke_and_wait",
            "arguments": {"agencyId": tenant.agency, "threadId": thread, "message": text},
            "_meta": {"progressToken": "p"},
        },
    }
    headers = {**tenant.bearer, "Accept": "application/json, text/event-stream"}

    @asynccontextmanager
    async def opened(http: httpx.AsyncClient) -> AsyncIterator[EventSource]:
        # MCP wants both types accepted, where `aconnect_sse` would send one.
        async with http.stream("POST", "/mcp", json=call, headers=headers) as response:
            yield EventSource(response)

    after = await cut_sse(tenant, opened, live=lambda sse: "notifications/progress" in sse.data)
    only_the_revocation(after)
    assert not [s for s in after if '"result"' in s.data], "the tool answered after the cut"
