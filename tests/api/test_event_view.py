"""One event view over HTTP: camelCase, the same on `/events`, SSE and WebSocket."""

from __future__ import annotations

import asyncio
import json

import httpx
from websockets.asyncio.client import connect

from agency.contracts.events import ChatMessage, MessageAppended
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, RecordedEvent
from tests.api.conftest import STATIC_AGENT, Api, Tenant, Thread, create_agency
from tests.api.test_streams import read_sse
from tests.helpers import assert_eventually

WAIT = 10.0


async def append_tool_answer(bus: Bus, thread: Thread) -> RecordedEvent:
    """A message with a snake_case contract field, written to the log as a runtime would.
    (No `request.accepted`: a runtime of another test package would pick it up.)"""
    position = await bus.store.last_position(thread.tenant.id, "thread", thread.thread_id)
    event = MessageAppended(
        run_id="run_view_1",
        message=ChatMessage(role="tool", content="42", tool_call_id="call_1"),
    )
    context = EventContext(
        agency_id=thread.agency_id, thread_id=thread.thread_id, run_id="run_view_1"
    )
    result = await bus.store.append(
        thread.tenant.id, "thread", thread.thread_id, [event], expected=position, context=context
    )
    return result.events[0]


async def thread_with_metadata(client: httpx.AsyncClient, tenant: Tenant) -> Thread:
    """A thread whose creation carries free-form metadata with a snake_case key."""
    agency_id = await create_agency(client, tenant)
    body = {"agentType": STATIC_AGENT, "metadata": {"customer_ref": "c-1"}}
    r = await client.post(f"/agency/{agency_id}/agents", json=body, headers=tenant.auth)
    assert r.status_code == 201, r.text
    return Thread(tenant, agency_id, r.json()["id"])


async def events(client: httpx.AsyncClient, thread: Thread, **params: str | int) -> dict:
    r = await client.get(thread.path + "/events", params=params, headers=thread.tenant.auth)
    assert r.status_code == 200, r.text
    return r.json()


async def test_events_are_camel_case_views_with_data_keys_kept(
    client: httpx.AsyncClient, bus: Bus, tenant_a: Tenant
) -> None:
    thread_a = await thread_with_metadata(client, tenant_a)
    stored = await append_tool_answer(bus, thread_a)

    async def projected() -> None:
        page = await events(client, thread_a, fromSeq=0, limit=1000)
        assert [e["seq"] for e in page["events"]] == [1, 2]

    await assert_eventually(projected, timeout=WAIT)
    page = await events(client, thread_a, fromSeq=0, limit=1000)
    assert page["format"] == "view" and page["hasMore"] is False
    created, accepted = page["events"]
    assert created["type"] == "thread.created"
    assert created["data"]["agentType"] == "assistant"
    assert created["data"]["agencyId"] == thread_a.agency_id
    assert created["data"]["request"]["customer_ref"] == "c-1"  # data keeps its keys
    assert accepted == {
        "eventId": stored.envelope.event_id,
        "threadId": thread_a.thread_id,
        "runId": "run_view_1",
        "seq": 2,
        "streamSeq": stored.stream_seq,
        "ts": accepted["ts"],
        "type": "message.appended",
        "data": {
            "runId": "run_view_1",
            "message": {"role": "tool", "content": "42", "toolCallId": "call_1"},
        },
        "version": 1,
        "agencyId": thread_a.agency_id,
        "aggregate": "thread",
        "aggregateId": thread_a.thread_id,
        "correlationId": stored.envelope.correlation_id,
        "causationId": None,
        "idempotencyKey": None,
    }
    assert accepted["ts"].startswith(stored.envelope.ts.isoformat()[:19])

    # Absent fromSeq is the start too; the raw envelope on request.
    assert [e["seq"] for e in (await events(client, thread_a))["events"]] == [1, 2]
    raw = await events(client, thread_a, fromSeq=2, format="envelope")
    assert raw["format"] == "envelope"
    (envelope,) = raw["events"]
    assert envelope["event_id"] == stored.envelope.event_id
    assert envelope["payload"]["message"]["tool_call_id"] == "call_1"
    assert envelope["stream_seq"] == stored.stream_seq


async def test_events_sse_and_ws_send_the_same_view(
    api: Api, client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    await append_tool_answer(bus, thread_a)

    async def projected() -> None:
        assert len((await events(client, thread_a))["events"]) == 2

    await assert_eventually(projected, timeout=WAIT)
    page = (await events(client, thread_a))["events"]
    auth = thread_a.tenant.auth
    async with client.stream("GET", thread_a.path + "/stream", headers=auth) as r:
        sse = [json.loads(f["data"]) for f in await read_sse(r.aiter_lines(), 2)]
    async with connect(api.ws_url + thread_a.path + "/ws?fromSeq=0", additional_headers=auth) as ws:
        async with asyncio.timeout(WAIT):
            frames = [json.loads(await ws.recv()) for _ in range(2)]
    assert sse == page and frames == page


async def test_bad_event_format_is_refused(client: httpx.AsyncClient, thread_a: Thread) -> None:
    for route in ("/events", "/stream"):
        r = await client.get(
            thread_a.path + route, params={"format": "xml"}, headers=thread_a.tenant.auth
        )
        assert r.status_code == 400, r.text
        assert "format" in r.json()["error"]
