"""Reading one aggregate's events with batch direct gets, each bounded by a count.

An aggregate is one subject (`tenant.<t>.evt.<aggregate>.<id>`). The server finds a
subject's next message from its subject index only while the stream holds fewer than 64k
distinct subjects; past that it walks the stream's blocks one by one. An unbounded batch
also walks on after the aggregate's last message, looking for more, to the end of the
stream. So "everything after position p" of a thread parked an hour ago walked the whole
hour, even when nothing was new.

A read therefore starts with the family's last message (`last_by_subj`, answered from
the index at any size). An aggregate's own sequence has no gaps, so that message says how
many events are new, and every batch asks for exactly what is missing: the server stops at
the last one. Nothing new costs one request; one event new (an approval) costs one too.
- From the start of an aggregate, the server finds its first event from the index and
  walks only the aggregate's own span.
- After a position far back, the newest events are looked for near the end first (a probe
  for the family's first message among the stream's last `_NEAR` messages before it), and
  anything older from where the reader stands, so a long gap between two bursts of events
  (a run parked, then approved) is not walked.

A message on the family that is no event (garbage, a forgery) breaks the count; a read
that meets one, or whose pieces do not join up, falls back to the plain scan, which skips
such messages and moves the position past them.

The newest event of some types before a given one (`newest`: a run's request, read at the
run's end) is looked for back from that event, in spans of the stream that double, each
read with the count of the aggregate's events it holds: what is read is the aggregate's
events since the one found (at most about as many again), not its history, and only events
of those types are decoded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError

from agency.infra.jetstream.decoding import event_type_of, record_from_direct_get
from agency.infra.jetstream.errors import StoreError, StoreTimeout
from agency.infra.jetstream.records import Position, RecordedEvent, UndecodableEvent
from agency.infra.retry import RetryPolicy

log = structlog.get_logger(__name__)

_PAGE = 1000
# How far back from the family's last message the newest events are looked for first.
_NEAR = 1000
# The first span of the stream `newest` reads back from an event (then twice as far, …).
_BACK = 16

# A page of a scan the server left unanswered is asked again from where the scan stands,
# as an aggregate's read is (`EventStore.fetch`): a stalled server or process is waited out
# within the appends' retry budget before the scan ends in `StoreTimeout`.
SCAN_RETRY = RetryPolicy(attempts=4, timeout=8.0, wait_initial=0.1)

Recorded = RecordedEvent | UndecodableEvent


class _Sequenced(msgspec.Struct):
    """An envelope's own sequence, read without its payload (in clear on a sealed one)."""

    seq: int = 0


_sequenced = msgspec.json.Decoder(_Sequenced)


class AggregateReads:
    """Batch direct gets on one stream. One instance per connection; safe for many tasks."""

    def __init__(self, nc: NATS, stream: str, timeout: float, *, near: int = _NEAR) -> None:
        self._nc = nc
        self._stream = stream
        self._timeout = timeout
        self._near = near

    async def after(self, family: str, position: Position) -> tuple[list[RecordedEvent], Position]:
        """The family's events after `position`, and the position to append at next."""
        last = await self.last(family)
        if last is None or last.stream_seq <= position.stream_seq:
            return [], position
        if isinstance(last, RecordedEvent) and last.seq > position.seq:
            if last.seq == position.seq + 1:
                return [last], last.position
            events = await self._counted(family, position, last)
            if events is not None:
                return events, last.position
        return await self.scan(family, position)

    async def first(self, family: str) -> RecordedEvent | None:
        """The family's first message, when it is an event: found from the index, and
        nothing walked past it."""
        found = await self._fetch(family, 1, 1)
        return found[0] if found else None

    async def last(self, family: str) -> Recorded | None:
        """The family's newest message, or None when it has none."""
        request = json.dumps({"last_by_subj": family}).encode()
        try:
            msg = await self._nc.request(
                f"$JS.API.DIRECT.GET.{self._stream}", request, timeout=self._timeout
            )
        except (NatsTimeoutError, NoRespondersError, TimeoutError):
            raise StoreTimeout(f"read of the last message of {family}", self._timeout) from None
        status = msg.headers.get("Status") if msg.headers else None
        if status == "404":
            return None
        if status is not None:
            raise _failed(self._stream, msg, status)
        return record_from_direct_get(msg)

    async def scan(self, family: str, position: Position) -> tuple[list[RecordedEvent], Position]:
        """Every message after `position` to the end of the stream: undecodable ones are
        logged and skipped, and the position passes them."""
        events: list[RecordedEvent] = []
        start = position.stream_seq + 1
        scanned = scan_from(self._nc, self._stream, family, start, self._timeout, retry=None)
        async for recorded in scanned:
            if isinstance(recorded, UndecodableEvent):
                log.warning(
                    "undecodable event skipped",
                    subject=recorded.subject,
                    stream_seq=recorded.stream_seq,
                    reason=recorded.reason,
                )
                position = Position(position.seq, recorded.stream_seq)
                continue
            events.append(recorded)
            position = recorded.position
        return events, position

    async def newest(
        self,
        family: str,
        before: RecordedEvent,
        types: frozenset[str],
        match: Callable[[RecordedEvent], bool],
    ) -> RecordedEvent | None:
        """The family's newest event before `before` of one of `types` that `match`es, or
        None: looked for back from `before` in spans of the stream of 16 messages, then
        twice as many, and so on, until a span holds one or the family's first event is
        passed. An event of another type is passed over undecoded."""
        end, end_seq, width = before.stream_seq, before.seq, _BACK
        while end > 1 and end_seq > 1:
            start = max(1, end - width)
            span = await self._span(family, start, end, end_seq)
            found: RecordedEvent | None = None
            for msg in span:
                if not _typed(msg, types):
                    continue
                recorded = record_from_direct_get(msg)
                if isinstance(recorded, RecordedEvent) and match(recorded):
                    found = recorded
            if found is not None or start == 1:
                return found
            if span:
                end = _stream_seq(span[0])
                end_seq = _aggregate_seq(span[0]) or end_seq
            width *= 2
        return None

    async def _span(self, family: str, start: int, end: int, end_seq: int) -> list[Msg]:
        """The family's messages from stream sequence `start` to before `end`, where its
        event `end_seq` is: the first asked for alone, the rest by the count its own
        sequence leaves before `end_seq`."""
        span: list[Msg] = []
        want = 1
        while want > 0:
            last: Msg | None = None
            async for msg in self.batch(
                {"seq": start, "next_by_subj": family, "batch": min(want, _PAGE)}
            ):
                last = msg
                if _stream_seq(msg) < end:
                    span.append(msg)
            if last is None or _stream_seq(last) >= end - 1:
                return span
            start = _stream_seq(last) + 1
            seq = _aggregate_seq(last)
            want = end_seq - seq - 1 if seq is not None else 1
        return span

    def batch(self, request: dict[str, Any]) -> AsyncIterator[Msg]:
        """The messages of one batch direct get, until the server's end-of-batch."""
        return direct_batch(self._nc, self._stream, request, self._timeout)

    async def _counted(
        self, family: str, position: Position, last: RecordedEvent
    ) -> list[RecordedEvent] | None:
        """Events `position.seq + 1 … last.seq`, or None where the count does not hold."""
        start = position.stream_seq + 1
        split: RecordedEvent | None = None
        # From the start, the server finds the first event from its index, and the count
        # stops it at the last: only the aggregate's own span is walked.
        if position.stream_seq and last.stream_seq - self._near > start:
            probe = await self._fetch(family, last.stream_seq - self._near, 1)
            if probe and position.seq < probe[0].seq <= last.seq:
                split = probe[0]
        if split is None:
            return _joined(
                await self._fetch(family, start, last.seq - position.seq), position, last
            )
        head: list[RecordedEvent] | None = []
        if split.seq > position.seq + 1:
            head = await self._fetch(family, start, split.seq - position.seq - 1)
        tail = await self._fetch(family, split.stream_seq, last.seq - split.seq + 1)
        if head is None or tail is None:
            return None
        return _joined(head + tail, position, last)

    async def _fetch(self, family: str, start: int, count: int) -> list[RecordedEvent] | None:
        """Up to `count` events of the family from stream sequence `start`; None if a
        message among them is no event."""
        events: list[RecordedEvent] = []
        while len(events) < count:
            request = {
                "seq": start,
                "next_by_subj": family,
                "batch": min(count - len(events), _PAGE),
            }
            got = 0
            async for msg in self.batch(request):
                got += 1
                recorded = record_from_direct_get(msg)
                if isinstance(recorded, UndecodableEvent):
                    return None
                events.append(recorded)
                start = recorded.stream_seq + 1
            if got == 0:
                break
        return events


def _joined(
    events: list[RecordedEvent] | None, position: Position, last: RecordedEvent
) -> list[RecordedEvent] | None:
    """The events if they are exactly `position.seq + 1 … last.seq`, in order, ending at
    `last`; otherwise None."""
    if events is None or not events or events[-1].stream_seq != last.stream_seq:
        return None
    expected = position.seq + 1
    for event in events:
        if event.seq != expected:
            return None
        expected += 1
    return events


async def scan_from(
    nc: NATS,
    stream: str,
    subjects: str,
    start: int,
    timeout: float,
    *,
    types: frozenset[str] | None = None,
    retry: RetryPolicy | None = SCAN_RETRY,
) -> AsyncIterator[Recorded]:
    """Every message on `subjects` (a subject or wildcard) from stream sequence `start` to
    the stream's end, page by page, as what it is: an event or not. With `types`, an event
    whose type header names another type is passed over without being decoded.

    A page the server leaves unanswered for `timeout` is asked again from the first
    message not yet passed, as `retry` allows (None: not at all; for a caller that retries
    the whole read); then `StoreTimeout`."""
    loop = asyncio.get_running_loop()
    failures, failing_since = 0, 0.0
    while True:
        request = {"seq": start, "next_by_subj": subjects, "batch": _PAGE}
        count, asked_at = 0, loop.time()
        try:
            async for msg in direct_batch(nc, stream, request, timeout):
                count += 1
                if types is not None and not _typed(msg, types):
                    start = int((msg.headers or {}).get("Nats-Sequence", start)) + 1
                    continue
                recorded = record_from_direct_get(msg)
                start = recorded.stream_seq + 1
                yield recorded
        except StoreTimeout:
            failures, failing_since = failures + 1, failing_since or asked_at
            wait = (
                None if retry is None else retry.wait_after(failures, loop.time() - failing_since)
            )
            if wait is None:
                raise
            log.warning("scan page unanswered; asked again", stream=stream, start=start)
            await asyncio.sleep(wait)
            continue
        failures, failing_since = 0, 0.0
        if count < _PAGE:
            return


def _stream_seq(msg: Msg) -> int:
    return int((msg.headers or {}).get("Nats-Sequence", "0"))


def _aggregate_seq(msg: Msg) -> int | None:
    """The aggregate's own sequence of the event in `msg`, None for a message that is no
    envelope."""
    try:
        return _sequenced.decode(msg.data).seq or None
    except msgspec.DecodeError:
        return None


def _typed(msg: Msg, types: frozenset[str]) -> bool:
    """Whether the message may be an event of `types`: its header says so, or it has none."""
    event_type = event_type_of(msg)
    return event_type is None or event_type in types


async def direct_batch(
    nc: NATS, stream: str, request: dict[str, Any], timeout: float
) -> AsyncIterator[Msg]:
    """The messages one batch direct get answers, until the server's end-of-batch; each
    within `timeout` of the one before."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(request).encode(), reply=inbox)
        while True:
            try:
                msg = await sub.next_msg(timeout=timeout)
            except NatsTimeoutError:
                raise StoreTimeout(f"read of {request}", timeout) from None
            status = msg.headers.get("Status") if msg.headers else None
            if status is None:
                yield msg
                continue
            if status in ("204", "404"):
                return
            raise _failed(stream, msg, status)
    finally:
        await sub.unsubscribe()


def _failed(stream: str, msg: Msg, status: str) -> StoreError:
    description = msg.headers.get("Description", "") if msg.headers else ""
    return StoreError(f"direct get on {stream} failed: {status} {description}")
