"""A thread's events over SSE and WebSocket: backfill, live, resume, no gap, no duplicate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from agency.contracts.events import ThreadCreated
from agency.contracts.ids import new_id
from agency.contracts.subjects import EVENTS_STREAM, event_subject
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.api.langgraph.follow import sse
from agency.services.api.langgraph.graphstate import GraphView, RunRef
from agency.services.api.server import run_api
from agency.services.api.streaming import ThreadFeed
from tests.api.conftest import Api, Tenant, Thread, append_messages
from tests.helpers import assert_eventually

WAIT = 10.0


async def read_sse(
    lines: AsyncIterator[str], count: int, *, named: bool = False
) -> list[dict[str, str]]:
    """The next `count` SSE messages `EventSource.onmessage` gets (the unnamed frames;
    with `named`, every frame), comments skipped, within a bounded wait."""
    events: list[dict[str, str]] = []
    current: dict[str, str] = {}
    async with asyncio.timeout(WAIT):
        async for line in lines:
            if line:
                name, _, value = line.partition(":")
                if name:  # an empty name is a comment
                    current[name] = value.removeprefix(" ")
                continue
            if "id" in current and (named or "event" not in current):
                events.append(current)
            current = {}
            if len(events) == count:
                return events
    raise AssertionError(f"the stream ended after {len(events)} of {count} events")


async def read_ws(ws: ClientConnection, count: int) -> list[dict[str, Any]]:
    async with asyncio.timeout(WAIT):
        return [json.loads(await ws.recv()) for _ in range(count)]


def ids(events: list[dict[str, str]]) -> list[int]:
    return [int(e["id"]) for e in events]


async def test_sse_backfills_from_seq_then_streams_live(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    await append_messages(bus, thread_a, "one", "two")  # seq 2 and 3, after thread.created
    url, auth = thread_a.path + "/stream", thread_a.tenant.auth
    async with client.stream("GET", url, params={"fromSeq": 2}, headers=auth) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.aiter_lines()
        backfill = await read_sse(lines, 2)
        assert ids(backfill) == [2, 3]
        view = json.loads(backfill[0]["data"])
        assert view["seq"] == 2 and view["type"] == "message.appended"
        assert (
            view["threadId"] == thread_a.thread_id and view["data"]["message"]["content"] == "one"
        )
        await append_messages(bus, thread_a, "three", "four")
        assert ids(await read_sse(lines, 2)) == [4, 5]


async def test_sse_sends_each_event_once_as_one_unnamed_frame(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    """Read as any SSE client reads it (httpx-sse): every id once, every frame a `message`."""
    await append_messages(bus, thread_a, "one", "two")  # seq 2 and 3
    url, auth = thread_a.path + "/stream", thread_a.tenant.auth
    frames: list[ServerSentEvent] = []
    async with aconnect_sse(client, "GET", url, headers=auth) as source:
        async with asyncio.timeout(WAIT):
            async for sse in source.aiter_sse():
                frames.append(sse)
                if sse.id == "3":
                    await append_messages(bus, thread_a, "three")  # live: seq 4
                if sse.id == "4":
                    # A repeat of anything already sent would arrive before seq 5.
                    await append_messages(bus, thread_a, "four")
                if sse.id == "5":
                    break
    assert [f.id for f in frames] == ["1", "2", "3", "4", "5"]
    assert {f.event for f in frames} == {"message"}
    assert [json.loads(f.data)["seq"] for f in frames] == [1, 2, 3, 4, 5]


async def test_sse_names_each_frame_by_its_type_on_request(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    await append_messages(bus, thread_a, "one")
    await append_messages(bus, thread_a, "two")
    url, auth = thread_a.path + "/stream", thread_a.tenant.auth
    params: dict[str, str | int] = {"fromSeq": 0, "named": "true"}
    async with client.stream("GET", url, params=params, headers=auth) as r:
        frames = await read_sse(r.aiter_lines(), 3, named=True)
    # Per-type listeners get the named frame; there is no second, unnamed copy.
    assert [(f.get("event"), int(f["id"])) for f in frames] == [
        ("thread.created", 1),
        ("message.appended", 2),
        ("message.appended", 3),
    ]
    assert json.loads(frames[2]["data"])["type"] == "message.appended"


async def test_sse_and_ws_send_the_stored_envelope_on_request(
    api: Api, client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    (stored,) = await append_messages(bus, thread_a, "one")
    url, auth = thread_a.path + "/stream", thread_a.tenant.auth
    params = {"fromSeq": 2, "format": "envelope"}
    async with client.stream("GET", url, params=params, headers=auth) as r:
        (frame,) = await read_sse(r.aiter_lines(), 1)
    envelope = json.loads(frame["data"])
    assert envelope["event_id"] == stored.envelope.event_id
    assert envelope["payload"]["message"]["content"] == "one"
    assert envelope["stream_seq"] == stored.stream_seq
    ws_url = api.ws_url + thread_a.path + "/ws?fromSeq=2&format=envelope"
    async with connect(ws_url, additional_headers=auth) as ws:
        (frame_ws,) = await read_ws(ws, 1)
    assert frame_ws == envelope


async def test_sse_reconnect_with_last_event_id_gets_exactly_the_rest(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    await append_messages(bus, thread_a, "one", "two", "three", "four")  # seq 2..5
    url, auth = thread_a.path + "/stream", thread_a.tenant.auth
    async with client.stream("GET", url, headers=auth) as r:
        assert ids(await read_sse(r.aiter_lines(), 3)) == [1, 2, 3]
    # Last-Event-ID wins over fromSeq.
    resumed = {**auth, "Last-Event-ID": "3"}
    async with client.stream("GET", url, params={"fromSeq": 1}, headers=resumed) as r:
        lines = r.aiter_lines()
        assert ids(await read_sse(lines, 2)) == [4, 5]
        await append_messages(bus, thread_a, "five")
        assert ids(await read_sse(lines, 1)) == [6]
        # A duplicate of anything already sent would arrive before this.
        await append_messages(bus, thread_a, "six")
        assert ids(await read_sse(lines, 1)) == [7]


async def test_sse_from_a_seq_not_written_yet_waits_for_it(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    url, auth = thread_a.path + "/stream", thread_a.tenant.auth
    async with client.stream("GET", url, params={"fromSeq": 3}, headers=auth) as r:
        lines = r.aiter_lines()
        await append_messages(bus, thread_a, "two", "three")
        assert ids(await read_sse(lines, 1)) == [3]


async def test_sse_disconnect_closes_the_live_reader(
    api: Api, client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    family = event_subject(thread_a.tenant.id, "thread", thread_a.thread_id)

    async def readers() -> int:
        """Subscriptions of the API's connection to this thread's consumers. (The server
        keeps an ephemeral consumer until its inactivity threshold, and nats-py has no
        public view of a connection's subscriptions.)"""
        consumers = await bus.js.consumers_info(EVENTS_STREAM)
        inboxes = {c.config.deliver_subject for c in consumers if c.config.filter_subject == family}
        subscriptions = api.deps.bus.nc._subs.values()
        return sum(1 for sub in subscriptions if sub.subject in inboxes)

    async with client.stream("GET", thread_a.path + "/stream", headers=thread_a.tenant.auth) as r:
        # Held: a line iterator that is garbage collected closes the response.
        lines = r.aiter_lines()
        assert ids(await read_sse(lines, 1)) == [1]

        async def reading() -> None:
            assert await readers() == 1

        await assert_eventually(reading)

    async def closed() -> None:
        assert await readers() == 0

    await assert_eventually(closed)


async def test_ws_backfills_then_streams_live_and_resumes_from_seq(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    await append_messages(bus, thread_a, "one", "two")
    url = api.ws_url + thread_a.path + "/ws"
    async with connect(url + "?fromSeq=2", additional_headers=thread_a.tenant.auth) as ws:
        frames = await read_ws(ws, 2)
        assert [f["seq"] for f in frames] == [2, 3]
        assert (
            frames[0]["type"] == "message.appended" and frames[0]["threadId"] == thread_a.thread_id
        )
        assert frames[0]["data"]["message"]["content"] == "one" and "payload" not in frames[0]
        await append_messages(bus, thread_a, "three")
        assert [f["seq"] for f in await read_ws(ws, 1)] == [4]
    async with connect(url + "?fromSeq=4", additional_headers=thread_a.tenant.auth) as ws:
        assert [f["seq"] for f in await read_ws(ws, 1)] == [4]
        await append_messages(bus, thread_a, "four")
        assert [f["seq"] for f in await read_ws(ws, 1)] == [5]


@pytest.mark.parametrize(
    ("case", "status"),
    [("no-credential", 401), ("wrong-key", 401), ("other-tenant", 404), ("bad-from-seq", 400)],
)
async def test_ws_handshake_is_refused_with_the_http_status(
    api: Api, thread_a: Thread, tenant_b: Tenant, case: str, status: int
) -> None:
    url = api.ws_url + thread_a.path + "/ws"
    headers = {
        "no-credential": {},
        "wrong-key": {"Authorization": "Bearer ak_nope_nope"},
        "other-tenant": tenant_b.auth,
        "bad-from-seq": thread_a.tenant.auth,
    }[case]
    if case == "bad-from-seq":
        url += "?fromSeq=-3"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, additional_headers=headers, open_timeout=WAIT):
            pass
    response = refused.value.response
    assert response.status_code == status
    assert json.loads(response.body or b"{}")["status"] == status


async def test_feed_sends_a_keepalive_when_quiet(api: Api, bus: Bus, thread_a: Thread) -> None:
    closing = asyncio.Event()
    feed = ThreadFeed(api.deps, thread_a.tenant.id, thread_a.thread_id, 0, closing, keepalive=0.2)
    assert [e.seq for e in await feed.backfill()] == [1]
    live = feed.live()
    try:
        async with asyncio.timeout(WAIT):
            assert await anext(live) == []
            await append_messages(bus, thread_a, "hello")
            assert [e.seq for e in await anext(live)] == [2]
            closing.set()
            assert [batch async for batch in live] == []
    finally:
        await live.aclose()
        await feed.aclose()


async def test_a_feed_waited_on_hands_out_what_it_read_ahead(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    """`until` reads ahead (an invoke's wait for its run's status); the stream that follows
    still gets every event, those read ahead first, each once."""
    closing = asyncio.Event()
    feed = ThreadFeed(api.deps, thread_a.tenant.id, thread_a.thread_id, 0, closing)

    def said(text: str) -> Callable[[list[RecordedEvent]], int | None]:
        def found(events: list[RecordedEvent]) -> int | None:
            # The payload as decoded: a thread's stored bytes hold its content sealed.
            return next((e.seq for e in events if text in repr(e.payload)), None)

        return found

    try:
        await feed.catch_up()
        assert await feed.until(said("never"), timeout=0.2) is None
        waiting = asyncio.create_task(feed.until(said("second"), timeout=WAIT))
        await append_messages(bus, thread_a, "first")
        await append_messages(bus, thread_a, "second")
        assert await asyncio.wait_for(waiting, WAIT) == 3
        assert feed.position is not None and feed.position.seq == 3
        assert [e.seq for e in await feed.backfill()] == [1, 2, 3]
        live = feed.live()
        try:
            async with asyncio.timeout(WAIT):
                await append_messages(bus, thread_a, "third")
                assert [e.seq for e in await anext(live)] == [4]
        finally:
            await live.aclose()
    finally:
        await feed.aclose()


async def test_a_run_stream_left_after_its_first_frame_lets_its_reader_go(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    """A LangGraph run stream's feed holds a live reader from the run's status on; a client
    gone after the first frame still ends the reader's interest."""
    tenant, thread_id = thread_a.tenant.id, thread_a.thread_id
    feed = ThreadFeed(api.deps, tenant, thread_id, 0, asyncio.Event())
    await feed.catch_up()
    assert await feed.until(lambda events: None, timeout=0.1) is None  # the reader is open
    family = event_subject(tenant, "thread", thread_id)

    async def bound() -> list[bool | None]:
        consumers = await bus.js.consumers_info(EVENTS_STREAM)
        return [c.push_bound for c in consumers if c.config.filter_subject == family]

    assert await bound() == [True]
    view = GraphView(tenant_id=tenant, thread_id=thread_id)
    frames = sse(feed, view, RunRef("run_gone"), ("values",), 0)
    assert b"metadata" in await anext(frames)
    await frames.aclose()

    async def let_go() -> None:
        assert True not in await bound()

    await assert_eventually(let_go)


async def test_a_quiet_threads_live_feed_starts_at_the_streams_end(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    """Started after the thread's last event instead, the server would look through every
    message stored since (other threads') for the thread's next one."""
    tenant = thread_a.tenant.id
    others = await bus.store.append(
        tenant, "thread", new_id(), [ThreadCreated(agency_id="a", agent_type="b")],
        expected=Position(),
    )  # fmt: skip
    closing = asyncio.Event()
    feed = ThreadFeed(api.deps, tenant, thread_a.thread_id, 0, closing, keepalive=0.2)
    assert [e.seq for e in await feed.backfill()] == [1]
    live = feed.live()
    try:
        async with asyncio.timeout(WAIT):
            assert await anext(live) == []  # a keepalive: the live reader is open
            family = event_subject(tenant, "thread", thread_a.thread_id)
            consumers = await bus.js.consumers_info(EVENTS_STREAM)
            starts = [
                c.config.opt_start_seq for c in consumers if c.config.filter_subject == family
            ]
            assert starts and starts[0] is not None
            assert starts[0] > others.position.stream_seq
            await append_messages(bus, thread_a, "hello")
            assert [e.seq for e in await anext(live)] == [2]
    finally:
        await live.aclose()
        await feed.aclose()


async def test_server_stops_promptly_with_a_stream_open(api: Api, thread_a: Thread) -> None:
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(run_api(api.deps, "127.0.0.1", 0, stop, started.set_result))
    try:
        url = await asyncio.wait_for(asyncio.shield(started), WAIT)
        assert not url.endswith(":0")
        async with (
            httpx.AsyncClient(base_url=url, timeout=WAIT) as client,
            client.stream("GET", thread_a.path + "/stream", headers=thread_a.tenant.auth) as r,
        ):
            lines = r.aiter_lines()
            assert ids(await read_sse(lines, 1)) == [1]
            stop.set()
            async with asyncio.timeout(5):
                await server
                # The stream ended rather than being cut off.
                assert [line async for line in lines] == []
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(server, return_exceptions=True), WAIT)
