"""The event store: append-only aggregates on the events log (one JetStream stream per
partition, `contracts/partitions.py`).

An aggregate instance (a thread, an agency, a tenant) is one subject,
`tenant.<t>.evt.<aggregate>.<id>` (with its partition's token after `evt` on a log of
several), in the stream of its partition; every event carries its type in the `Agency-Event-Type`
header (and in its envelope). Appends carry `Nats-Expected-Last-Subject-Sequence` on that
subject, so exactly one writer wins each position; a decision of several events is
one atomic batch (a single event is a plain publish: the server handles atomic batches
about ten times slower). The server checks the expected sequence before the message id of
a plain publish, so a conflict is settled by looking at what won: our own earlier attempt,
or an append with the same idempotency key, is a duplicate rather than a conflict. Reads
use batch direct gets without creating a consumer, each bounded by the count of events
it expects (`aggregate_reads`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext

from agency.contracts.envelope import Envelope
from agency.contracts.events import AnyEvent
from agency.contracts.ids import new_id
from agency.contracts.partitions import EventLayout
from agency.contracts.subjects import (
    EVENT_TYPE_HEADER,
    EVENTS_STREAM,
    NOTED_TYPES,
    Aggregate,
    note_subject,
)
from agency.infra.jetstream.aggregate_reads import AggregateReads
from agency.infra.jetstream.decoding import decode_recorded, record_from_direct_get
from agency.infra.jetstream.envelopes import encode_checked, new_envelopes, prepare_keys
from agency.infra.jetstream.errors import (
    AppendError,
    BatchTooLarge,
    ConcurrencyError,
    EventTooLarge,
    StoreError,
    StoreTimeout,
)
from agency.infra.jetstream.records import (
    AppendResult,
    EventContext,
    Position,
    RecordedEvent,
    UndecodableEvent,
)
from agency.infra.jetstream.streams import ATOMIC_BATCH_LIMIT, MAX_EVENT_BYTES
from agency.infra.jetstream.tracing import current_carrier
from agency.infra.keyed_locks import KeyedLocks

log = structlog.get_logger(__name__)

WRONG_LAST_SEQUENCE = 10071
BATCH_INFLIGHT_CONFLICT = 10164
BATCH_DUPLICATE_MSG_ID = 10201
_ACTUAL_SEQ = re.compile(r"wrong last sequence: (\d+)")

# Room left in a message for the headers an append sends (expected sequence, message id,
# batch ids, trace context).
_HEADER_ROOM = 4096
MAX_EVENT_BODY = MAX_EVENT_BYTES - _HEADER_ROOM


class EventStore:
    """Appends to and reads aggregates. One instance per connection; safe for many tasks."""

    def __init__(
        self,
        nc: NATS,
        js: JetStreamContext,
        *,
        stream: str = EVENTS_STREAM,
        timeout: float = 2.0,
        retry_budget: float = 8.0,
        layout: EventLayout | None = None,
    ) -> None:
        """`stream`: the one events stream of an unpartitioned log; `layout` (of several
        partitions) names the streams itself."""
        self._nc = nc
        self._js = js
        self._layout = layout or EventLayout()
        self._stream = stream if not self._layout.partitioned else self._layout.stream(0)
        self._timeout = timeout
        self._reads_by_stream = {
            name: AggregateReads(nc, name, timeout)
            for name in (self._layout.streams if self._layout.partitioned else (stream,))
        }
        # A stream leader election stalls writes for about 5 s; a retry with the same message
        # ids inside this budget is stored once.
        self._retry_budget = retry_budget
        # One append in flight per aggregate: a second expected-sequence append racing the
        # first is refused by a replicated stream even when it would have been valid.
        self._locks: KeyedLocks[str] = KeyedLocks()

    @property
    def stream(self) -> str:
        """The events stream of an unpartitioned log (partition 0's otherwise)."""
        return self._stream

    @property
    def layout(self) -> EventLayout:
        return self._layout

    def stream_of(self, aggregate_id: str) -> str:
        """The stream holding an aggregate's events."""
        return self._layout.stream_of(aggregate_id) if self._layout.partitioned else self._stream

    def subject(self, tenant_id: str, aggregate: str, aggregate_id: str) -> str:
        """An aggregate's subject."""
        return self._layout.subject(tenant_id, aggregate, aggregate_id)

    def _reads_of(self, aggregate_id: str) -> AggregateReads:
        return self._reads_by_stream[self.stream_of(aggregate_id)]

    async def append(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        payloads: Sequence[AnyEvent],
        *,
        expected: Position,
        context: EventContext | None = None,
        idempotency_key: str | None = None,
        keyed: int | None = None,
    ) -> AppendResult:
        """Append the events of one decision after `expected`, atomically.

        Raises `InvalidEvent` (nothing appended) when an event would not decode back under
        its contract, `ConcurrencyError` when the aggregate has moved past `expected`. With an
        `idempotency_key`, a repeat of the same append is stored once and answered with
        `duplicate=True`. `keyed`: how many of the first events the key and the context's
        causation belong to (a command's decision, stored with what follows from it); all
        of them when None.
        """
        if not payloads:
            return AppendResult(position=expected, events=())
        if len(payloads) > ATOMIC_BATCH_LIMIT:
            raise BatchTooLarge(len(payloads), ATOMIC_BATCH_LIMIT)
        family = self.subject(tenant_id, aggregate, aggregate_id)
        envelopes = self._stamp(
            new_envelopes(
                tenant_id,
                aggregate,
                aggregate_id,
                payloads,
                expected,
                context,
                idempotency_key,
                keyed,
                trace=current_carrier(),
            )
        )
        subjects = [family] * len(envelopes)
        types = [e.type for e in envelopes]
        # Without a key no message id is stored: a retried publish that had landed is
        # recognised by its event ids when it conflicts (`_settle_conflict`), and every
        # consumer is spared parsing one more header per event.
        msg_ids = [
            f"{aggregate_id}:{idempotency_key}:{i}"
            if idempotency_key and (keyed is None or i < keyed)
            else None
            for i in range(len(envelopes))
        ]
        await prepare_keys(envelopes)
        bodies = encode_checked(envelopes)
        for envelope, body in zip(envelopes, bodies, strict=True):
            if len(body) > MAX_EVENT_BODY:
                raise EventTooLarge(envelope.type, len(body), MAX_EVENT_BODY)
        lock = self._locks.lock(family)
        async with lock:
            try:
                if len(envelopes) == 1:
                    last_seq, duplicate = await self._publish_single(
                        family, types[0], bodies[0], msg_ids[0], expected
                    )
                else:
                    last_seq, duplicate = await self._publish_batch(
                        family, types, bodies, msg_ids, expected
                    )
            except ConcurrencyError:
                settled = await self._settle_conflict(
                    tenant_id, aggregate, aggregate_id, envelopes, expected, idempotency_key
                )
                if settled is None:
                    raise
                return settled
        if duplicate:
            return AppendResult(position=expected, events=(), duplicate=True)
        first = last_seq - len(envelopes) + 1
        recorded = tuple(
            RecordedEvent(envelope=e, stream_seq=first + i, subject=s, raw=b)
            for i, (e, s, b) in enumerate(zip(envelopes, subjects, bodies, strict=True))
        )
        await self._announce(tenant_id, recorded)
        return AppendResult(position=recorded[-1].position, events=recorded)

    async def _announce(self, tenant_id: str, recorded: Sequence[RecordedEvent]) -> None:
        """Events of `NOTED_TYPES` are announced on their note subject, at most once (plain
        NATS): listeners that act at once (a cancel) need not hear every event."""
        for event in recorded:
            if event.type in NOTED_TYPES:
                try:
                    await self._nc.publish(note_subject(tenant_id, event.type), event.raw)
                except (nats.errors.Error, OSError) as e:
                    log.warning("note not published", event=event.type, error=str(e))

    def _stamp(self, envelopes: list[Envelope]) -> list[Envelope]:
        """The envelopes of one append as stored; a subclass may set fields per event."""
        return envelopes

    async def _publish_single(
        self, subject: str, event_type: str, body: bytes, msg_id: str | None, expected: Position
    ) -> tuple[int, bool]:
        family = subject
        headers = {
            EVENT_TYPE_HEADER: event_type,
            "Nats-Expected-Last-Subject-Sequence": str(expected.stream_seq),
        }
        if msg_id is not None:
            headers["Nats-Msg-Id"] = msg_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_budget
        while True:
            try:
                reply = await self._nc.request(
                    subject, body, headers=headers, timeout=self._timeout
                )
            except (TimeoutError, NatsTimeoutError, NoRespondersError):
                # The same message id and bytes make the retry safe: stored once at most.
                if loop.time() >= deadline:
                    raise StoreTimeout(f"append to {family}", self._retry_budget) from None
                await asyncio.sleep(0.25)
                continue
            return self._accept(_json(reply.data), subject, family, expected)

    async def _settle_conflict(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        envelopes: list[Envelope],
        expected: Position,
        idempotency_key: str | None,
    ) -> AppendResult | None:
        """After a conflict: was the winner this very append (a retried publish) or a repeat
        of it (same idempotency key)? Then the append is done; otherwise it is a conflict."""
        newer = await self.read(tenant_id, aggregate, aggregate_id, after=expected)
        ours = [e for e in newer if e.envelope.event_id == envelopes[0].event_id]
        if ours:
            mine = newer[newer.index(ours[0]) : newer.index(ours[0]) + len(envelopes)]
            return AppendResult(position=mine[-1].position, events=tuple(mine))
        if idempotency_key and any(e.envelope.idempotency_key == idempotency_key for e in newer):
            return AppendResult(position=expected, events=(), duplicate=True)
        return None

    async def _publish_batch(
        self,
        family: str,
        types: list[str],
        bodies: list[bytes],
        msg_ids: list[str | None],
        expected: Position,
    ) -> tuple[int, bool]:
        subject = family
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_budget
        while True:
            batch_id = new_id()
            last = len(bodies)
            for i, (event_type, body, msg_id) in enumerate(
                zip(types, bodies, msg_ids, strict=True), start=1
            ):
                headers = {
                    EVENT_TYPE_HEADER: event_type,
                    "Nats-Batch-Id": batch_id,
                    "Nats-Batch-Sequence": str(i),
                }
                if msg_id is not None:
                    headers["Nats-Msg-Id"] = msg_id
                if i == 1:
                    # One expectation per aggregate per batch: a second one is refused.
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(expected.stream_seq)
                if i < last:
                    await self._nc.publish(subject, body, headers=headers)
                    continue
                headers["Nats-Batch-Commit"] = "1"
                try:
                    reply = await self._nc.request(
                        subject, body, headers=headers, timeout=self._timeout
                    )
                except (TimeoutError, NatsTimeoutError, NoRespondersError):
                    if loop.time() >= deadline:
                        raise StoreTimeout(
                            f"atomic append to {family}", self._retry_budget
                        ) from None
                    await asyncio.sleep(0.25)
                    break
                return self._accept(_json(reply.data), subject, family, expected)

    def _accept(
        self, reply: dict[str, Any], subject: str, family: str, expected: Position
    ) -> tuple[int, bool]:
        error = reply.get("error")
        if error is None:
            return int(reply["seq"]), bool(reply.get("duplicate", False))
        code = error.get("err_code")
        description = str(error.get("description", ""))
        if code == WRONG_LAST_SEQUENCE:
            match = _ACTUAL_SEQ.search(description)
            actual = int(match.group(1)) if match else None
            raise ConcurrencyError(family, expected.stream_seq, actual)
        if code == BATCH_INFLIGHT_CONFLICT:
            raise ConcurrencyError(family, expected.stream_seq, None)
        if code == BATCH_DUPLICATE_MSG_ID:
            return 0, True
        raise AppendError(subject, code, description)

    async def read(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
    ) -> list[RecordedEvent]:
        """Every event of one aggregate after `after` (default: from the start), in order."""
        events, _ = await self.read_positioned(tenant_id, aggregate, aggregate_id, after=after)
        return events

    async def read_positioned(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
        from_leader: bool = False,
    ) -> tuple[list[RecordedEvent], Position]:
        """The events after `after`, and the position to append at next.

        A message on the aggregate's subjects that is no event (garbage, or a forged
        envelope) is skipped, but the position passes it: the stream holds it, so an
        append expecting an earlier position would be refused forever.

        `from_leader`: answered by the stream's leader, one message at a time. A direct get
        may be answered by any replica of a replicated stream, and a replica that is
        catching up (after a restart) answers with what it has: reads are not
        read-your-writes. A decision that must not rest on a stale read, such as refusing a
        command for good, is checked again with this slower read first.
        """
        family = self.subject(tenant_id, aggregate, aggregate_id)
        if from_leader:
            stream = self.stream_of(aggregate_id)
            return await self._read_from_leader(stream, family, after or Position())
        return await self._reads_of(aggregate_id).after(family, after or Position())

    async def _read_from_leader(
        self, stream: str, family: str, position: Position
    ) -> tuple[list[RecordedEvent], Position]:
        events: list[RecordedEvent] = []
        while True:
            try:
                msg = await self._js.get_msg(
                    stream, seq=position.stream_seq + 1, subject=family, next=True
                )
            except nats.js.errors.NotFoundError:
                return events, position
            recorded = decode_recorded(msg.data or b"", msg.seq or 0, msg.subject or "")
            if isinstance(recorded, UndecodableEvent):
                position = Position(position.seq, recorded.stream_seq)
                continue
            events.append(recorded)
            position = recorded.position

    async def first(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> RecordedEvent | None:
        """The aggregate's first event (None when it has none, or its first message is
        no event), without reading the rest."""
        family = self.subject(tenant_id, aggregate, aggregate_id)
        return await self._reads_of(aggregate_id).first(family)

    async def last_position(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> Position:
        """The aggregate's current position, without reading its history."""
        family = self.subject(tenant_id, aggregate, aggregate_id)
        # One subject per aggregate: its last message is the aggregate's last event.
        request = {"multi_last": [family], "batch": 1}
        best = Position()
        async for msg in self._reads_of(aggregate_id).batch(request):
            recorded = record_from_direct_get(msg)
            if isinstance(recorded, RecordedEvent) and recorded.stream_seq > best.stream_seq:
                best = recorded.position
        return best


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as e:
        raise StoreError(f"unreadable answer from the server: {data[:200]!r}") from e
    if not isinstance(value, dict):
        raise StoreError(f"unexpected answer from the server: {data[:200]!r}")
    return value
