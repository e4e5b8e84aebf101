"""A thread's events as they happen: Server-Sent Events and WebSocket.

Both read the log itself, not a read model, so they work while projections lag: first the
thread's stored events from the requested sequence (batch direct gets), then live ones
from an ordered consumer on the thread's subject family that starts after the last stored
event read, or after the stream's end as it was before that read if that is later.
Nothing can fall between the two, and anything delivered twice (a consumer reset) is
dropped by the thread's own sequence, so a client sees each event once, in order.
Reconnecting with `Last-Event-ID` (SSE) or `fromSeq` gets exactly the rest.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Annotated, Any, TypeVar

import anyio
import structlog
from litestar import WebSocket, get, websocket
from litestar.datastructures import State
from litestar.exceptions import HTTPException, WebSocketDisconnect
from litestar.params import HeaderParameter, QueryParameter
from litestar.response import Stream
from nats.errors import Error as NatsError

from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.reader import Delivered, OrderedReader
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.api.auth import QUERY_TOKEN_OPT, Caller, Deps, tenant_of, thread_created
from agency.services.api.deps import ApiDeps
from agency.services.api.eventview import EventFormat, encode_envelope, encode_view
from agency.services.api.path_params import AgencyId, ThreadId
from agency.services.api.revocation import deny_websocket
from agency.services.api.routes_queries import MAX_SEQ, int_param
from agency.services.api.sse import KEEPALIVE, sse_answer, stored_then_live

log = structlog.get_logger(__name__)

T = TypeVar("T")

KEEPALIVE_SECONDS = 15.0
# How often a quiet stream looks at the clock and at the server shutting down.
_TICK_SECONDS = 0.5
# The app state entry the server sets when it stops, so open streams end and let it.
CLOSING = "streams_closing"


def closing_event(state: State) -> asyncio.Event:
    event = state.get(CLOSING)
    assert isinstance(event, asyncio.Event), "create_app puts the closing event in the state"
    return event


class ThreadFeed:
    """One thread's events after `after_seq`: `backfill()` once, then `live()`. Given the
    log `position` of the event at `after_seq`, the backfill reads only what follows it;
    otherwise it reads the thread from its start and skips what it has sent. To wait for
    what a command leads to: `catch_up()` before sending it, then `until()` it is there
    (each event as the log stores it); `backfill()` still hands out what was read ahead."""

    def __init__(
        self,
        deps: ApiDeps,
        tenant: str,
        thread_id: str,
        after_seq: int,
        closing: asyncio.Event,
        *,
        position: Position | None = None,
        keepalive: float = KEEPALIVE_SECONDS,
    ) -> None:
        self._deps = deps
        self._position = position
        self._tenant = tenant
        self._thread_id = thread_id
        self._last_seq = after_seq
        self._closing = closing
        self._keepalive = keepalive
        self._live_from = 0
        self._reader: OrderedReader | None = None
        self._closed = False
        # Events read ahead by `until` (after the stored ones `catch_up` read), not yet
        # handed out: None until `catch_up`.
        self._ahead: list[RecordedEvent] | None = None

    @property
    def position(self) -> Position | None:
        """Where the last event read stands in the log (None before any)."""
        return self._position

    async def catch_up(self) -> None:
        """Read the stored events; from here on, nothing of the thread is missed. Open the
        feed like this before sending a command whose events `until` waits for."""
        if self._ahead is not None:
            return
        store = self._deps.bus.store
        stream = await self._deps.bus.js.stream_info(store.stream_of(self._thread_id))
        events = await self._deps.bus.store.read(
            self._tenant, "thread", self._thread_id, after=self._position
        )
        # Live events start after the stream's end as it was before the read (the read saw
        # every event of the thread stored by then), or after the last event read if that
        # is later. Never further back: the server would look through every message
        # between a quiet thread's last event and the end for the next one of its own.
        last_read = events[-1].stream_seq if events else 0
        self._live_from = max(last_read, stream.state.last_seq or 0) + 1
        self._ahead = self._fresh(events)

    async def until(
        self, found: Callable[[list[RecordedEvent]], T | None], timeout: float
    ) -> T | None:
        """Read ahead until `found` answers something other than None for the events read
        (the stored ones first, then each live batch as the log stores it); None after
        `timeout`. What was read is still handed out by `backfill()`, then `live()`."""
        await self.catch_up()
        assert self._ahead is not None
        answer = found(list(self._ahead))
        if answer is not None:
            return answer
        reader = await self._open_reader()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        while not self._closing.is_set() and (remaining := deadline - loop.time()) > 0:
            fresh = self._fresh(await reader.next_batch(timeout=min(remaining, _TICK_SECONDS)))
            if fresh:
                self._ahead.extend(fresh)
                answer = found(fresh)
                if answer is not None:
                    return answer
        return None

    async def backfill(self) -> list[RecordedEvent]:
        """The stored events after `after_seq` (and any `until` read ahead); live events
        start after the last one read."""
        await self.catch_up()
        ahead, self._ahead = self._ahead or [], []
        return ahead

    async def _open_reader(self) -> OrderedReader:
        assert self._live_from, "catch_up() first"
        if self._reader is None:
            reader = OrderedReader(
                self._deps.bus.js,
                self._deps.bus.store.subject(self._tenant, "thread", self._thread_id),
                start_seq=self._live_from,
                batch=200,
                stream=self._deps.bus.store.stream_of(self._thread_id),
            )
            self._reader = reader
            await reader.open()
        return self._reader

    async def live(self) -> AsyncGenerator[list[RecordedEvent], None]:
        """Batches of new events; an empty batch when the stream was quiet for `keepalive`."""
        assert self._live_from, "backfill() first"
        loop = asyncio.get_running_loop()
        try:
            reader = await self._open_reader()
            quiet_since = loop.time()
            while not self._closed and not self._closing.is_set():
                fresh = self._fresh(await reader.next_batch(timeout=_TICK_SECONDS))
                now = loop.time()
                if fresh:
                    quiet_since = now
                    yield fresh
                elif now - quiet_since >= self._keepalive:
                    quiet_since = now
                    yield []
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Close the live reader; idempotent, and finishes even while being cancelled."""
        self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None:
            with anyio.CancelScope(shield=True):
                await reader.close()

    def _fresh(self, delivered: Sequence[Delivered | RecordedEvent]) -> list[RecordedEvent]:
        out: list[RecordedEvent] = []
        for item in delivered:
            if not isinstance(item, RecordedEvent):
                log.warning("undecodable event not streamed", stream_seq=item.stream_seq)
                continue
            if item.seq > self._last_seq:
                self._last_seq = item.seq
                self._position = item.position
                out.append(item)
        return out


FromSeq = Annotated[
    str | None,
    QueryParameter(
        name="fromSeq",
        required=False,
        description="The first event seq to send (the thread's own sequence, from 1); "
        "0 or absent: from the start.",
    ),
]


FormatParam = Annotated[
    EventFormat,
    QueryParameter(
        name="format",
        required=False,
        description="`view` (default): camelCase EventViews; `envelope`: the stored envelopes.",
    ),
]


@get(
    "/agency/{agencyId:str}/agent/{threadId:str}/stream",
    opt={QUERY_TOKEN_OPT: True},
    summary="Stream the thread's events (Server-Sent Events)",
    description=(
        "Stored events from `fromSeq` (0 or absent: from the start; the `Last-Event-ID` "
        "header, the last seq received, wins), then live ones. Every event is sent as one "
        "frame, `id: <seq>` and `data` (an EventView, its `type` inside; the stored envelope "
        "with `format=envelope`), without a name, for `EventSource.onmessage`; with "
        "`named=true` the frame is named instead (`event: <type>`), for per-type listeners "
        "(`addEventListener('tool.output', …)`). A `: keep-alive` comment is sent every "
        "15 s. Browsers' EventSource cannot send headers, so this route also accepts the API "
        "key as `?access_token=`."
    ),
    media_type="text/event-stream",
)
async def stream(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    state: State,
    from_seq: FromSeq = None,
    last_event_id: Annotated[
        str | None,
        HeaderParameter(
            name="Last-Event-ID",
            required=False,
            description="The last event seq received; wins over fromSeq (EventSource sends it).",
        ),
    ] = None,
    # Declared for the OpenAPI document only: the auth middleware reads it.
    access_token: Annotated[
        str | None,
        QueryParameter(
            name="access_token",
            required=False,
            description="The API key, for clients that cannot send an Authorization header.",
        ),
    ] = None,
    event_format: FormatParam = "view",
    named: Annotated[
        bool,
        QueryParameter(
            name="named",
            required=False,
            description="`true`: each frame carries `event: <type>` (for per-type listeners; "
            "`EventSource.onmessage` then gets nothing). Default `false`: unnamed frames.",
        ),
    ] = False,
) -> Stream:
    after = _after_seq(from_seq, last_event_id)
    tenant = tenant_of(principal)
    await thread_created(deps, tenant, agency_id, thread_id)
    feed = ThreadFeed(deps, tenant, thread_id, after, closing_event(state))
    backlog = await feed.backfill()
    # The response does not close its iterator when the client goes away; this does.
    return sse_answer(_sse(feed, backlog, event_format, named=named), feed.aclose)


async def _sse(
    feed: ThreadFeed, backlog: list[RecordedEvent], event_format: EventFormat, *, named: bool
) -> AsyncIterator[bytes]:
    try:
        async for event in stored_then_live(backlog, feed.live()):
            yield KEEPALIVE if event is None else sse_frame(event, event_format, named=named)
    except (NatsError, StoreError, TimeoutError) as e:
        # The response has started: end the stream; the client resumes with Last-Event-ID.
        log.warning("event stream ended by a NATS error", error=str(e))
    finally:
        await feed.aclose()


def event_json(event: RecordedEvent, event_format: EventFormat) -> bytes:
    """The event as HTTP clients get it: the view, or the stored envelope."""
    if event_format == "envelope":
        return encode_envelope(event.raw, event.stream_seq)
    return encode_view(event.envelope, event.stream_seq)


def sse_frame(event: RecordedEvent, event_format: EventFormat, *, named: bool = False) -> bytes:
    """The event's one frame: unnamed (for `onmessage`), or named by its type."""
    data = event_json(event, event_format)  # compact JSON: never a line break
    frame = b"id: %d\ndata: %s\n\n" % (event.seq, data)
    return b"event: %s\n%s" % (event.type.encode(), frame) if named else frame


@websocket("/agency/{agencyId:str}/agent/{threadId:str}/ws")
async def stream_ws(
    socket: WebSocket[Any, Any, State],
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    from_seq: FromSeq = None,
    event_format: FormatParam = "view",
) -> None:
    """The thread's events as JSON text messages, one EventView each (the stored envelope
    with `format=envelope`), like `/stream`."""
    try:
        after = _after_seq(from_seq, None)
        tenant = tenant_of(principal)
        await thread_created(deps, tenant, agency_id, thread_id)
    except HTTPException as e:
        # Refuse the handshake with the status a plain request would have got.
        await deny_websocket(socket.scope, socket.send, e.status_code, e.detail)
        return
    feed = ThreadFeed(deps, tenant, thread_id, after, closing_event(socket.app.state))
    await socket.accept()
    pump = asyncio.create_task(_pump(socket, feed, event_format), name="ws-pump")
    watch = asyncio.create_task(_until_disconnect(socket), name="ws-watch")
    try:
        done, _ = await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        if pump in done and socket.connection_state != "disconnect":
            await socket.close(code=_close_code(pump, socket))
    finally:
        for task in (pump, watch):
            task.cancel()
        await asyncio.gather(pump, watch, return_exceptions=True)
        await feed.aclose()


def _close_code(pump: asyncio.Task[None], socket: WebSocket[Any, Any, State]) -> int:
    if pump.exception() is not None:
        log.error("websocket stream failed", error=str(pump.exception()))
        return 1011  # internal error
    return 1001 if closing_event(socket.app.state).is_set() else 1000  # going away / done


async def _pump(
    socket: WebSocket[Any, Any, State], feed: ThreadFeed, event_format: EventFormat
) -> None:
    try:
        for event in await feed.backfill():
            await socket.send_text(event_json(event, event_format).decode())
        async for batch in feed.live():
            for event in batch:
                await socket.send_text(event_json(event, event_format).decode())
    except (WebSocketDisconnect, OSError):
        return


async def _until_disconnect(socket: WebSocket[Any, Any, State]) -> None:
    """Read (and ignore) what the client sends until it goes away."""
    while True:
        message = await socket.receive()
        if message["type"] == "websocket.disconnect":
            return


def _after_seq(from_seq: str | None, last_event_id: str | None) -> int:
    """The seq after which to send: `Last-Event-ID` wins over `fromSeq`; 400 if either is not
    a count (a malformed `fromSeq` is refused even when `Last-Event-ID` wins)."""
    start = int_param("fromSeq", from_seq, 0, 0, MAX_SEQ)
    if last_event_id is not None:
        return int_param("Last-Event-ID", last_event_id, 0, 0, MAX_SEQ)
    return max(start - 1, 0)


STREAM_ROUTES = [stream, stream_ws]
