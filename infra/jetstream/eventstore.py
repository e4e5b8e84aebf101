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

from collections.abc import Callable, Sequence

import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from agency.contracts.envelope import Envelope
from agency.contracts.partitions import EventLayout
from agency.contracts.subjects import EVENTS_STREAM, NOTED_TYPES, Aggregate, note_subject
from agency.infra.jetstream.aggregate_reads import AggregateReads
from agency.infra.jetstream.appends import AppendPublisher
from agency.infra.jetstream.decoding import decode_recorded, record_from_direct_get
from agency.infra.jetstream.envelopes import encode_checked, new_envelopes, prepare_keys
from agency.infra.jetstream.errors import (
    BatchTooLarge,
    ConcurrencyError,
    EventTooLarge,
    StoreTimeout,
)
from agency.infra.jetstream.ports import AggregateRead, AggregateStore, Append
from agency.infra.jetstream.records import (
    AppendResult,
    Position,
    RecordedEvent,
    UndecodableEvent,
)
from agency.infra.jetstream.streams import ATOMIC_BATCH_LIMIT, MAX_EVENT_BYTES
from agency.infra.jetstream.tracing import current_carrier
from agency.infra.keyed_locks import KeyedLocks
from agency.infra.retry import RetryPolicy

log = structlog.get_logger(__name__)

# Room left in a message for the headers an append sends (expected sequence, message id,
# batch ids, trace context).
_HEADER_ROOM = 4096
MAX_EVENT_BODY = MAX_EVENT_BYTES - _HEADER_ROOM


class EventStore(AggregateStore):
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
        self._reads_by_stream = {
            name: AggregateReads(nc, name, timeout)
            for name in (self._layout.streams if self._layout.partitioned else (stream,))
        }
        # A stream leader election stalls writes for about 5 s; a retry with the same message
        # ids inside this budget is stored once.
        self._publish = AppendPublisher(nc, timeout=timeout, retry_budget=retry_budget)
        # A read is asked again when the server did not answer in time (a stall of the
        # server, or of this process), within the same budget: reading twice is harmless.
        self._read_retry = RetryPolicy(attempts=4, timeout=retry_budget, wait_initial=0.1)
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

    async def write(self, append: Append) -> AppendResult:
        """Append the events of one decision after `expected`, atomically.

        Raises `InvalidEvent` (nothing appended) when an event would not decode back under
        its contract, `ConcurrencyError` when the aggregate has moved past `expected`. With an
        `idempotency_key`, a repeat of the same append is stored once and answered with
        `duplicate=True`.
        """
        expected, key, keyed = append.expected, append.idempotency_key, append.keyed
        if not append.payloads:
            return AppendResult(position=expected, events=())
        if len(append.payloads) > ATOMIC_BATCH_LIMIT:
            raise BatchTooLarge(len(append.payloads), ATOMIC_BATCH_LIMIT)
        family = self.subject(append.tenant_id, append.aggregate, append.aggregate_id)
        envelopes = self._stamp(new_envelopes(append, trace=current_carrier()))
        types = [e.type for e in envelopes]
        # Without a key no message id is stored: a retried publish that had landed is
        # recognised by its event ids when it conflicts (`_settle_conflict`), and every
        # consumer is spared parsing one more header per event.
        msg_ids = [
            f"{append.aggregate_id}:{key}:{i}" if key and (keyed is None or i < keyed) else None
            for i in range(len(envelopes))
        ]
        await prepare_keys(envelopes)
        bodies = encode_checked(envelopes)
        for envelope, body in zip(envelopes, bodies, strict=True):
            if len(body) > MAX_EVENT_BODY:
                raise EventTooLarge(envelope.type, len(body), MAX_EVENT_BODY)
        async with self._locks.lock(family):
            try:
                if len(envelopes) == 1:
                    last_seq, duplicate = await self._publish.single(
                        family, types[0], bodies[0], msg_ids[0], expected
                    )
                else:
                    last_seq, duplicate = await self._publish.batch(
                        family, types, bodies, msg_ids, expected
                    )
            except ConcurrencyError:
                settled = await self._settle_conflict(append, envelopes)
                if settled is None:
                    raise
                return settled
        if duplicate:
            return AppendResult(position=expected, events=(), duplicate=True)
        first = last_seq - len(envelopes) + 1
        recorded = tuple(
            RecordedEvent(envelope=e, stream_seq=first + i, subject=family, raw=b)
            for i, (e, b) in enumerate(zip(envelopes, bodies, strict=True))
        )
        await self._announce(append.tenant_id, recorded)
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

    async def _settle_conflict(
        self, append: Append, envelopes: list[Envelope]
    ) -> AppendResult | None:
        """After a conflict: was the winner this very append (a retried publish) or a repeat
        of it (same idempotency key)? Then the append is done; otherwise it is a conflict."""
        expected, idempotency_key = append.expected, append.idempotency_key
        newer = await self.read(
            append.tenant_id, append.aggregate, append.aggregate_id, after=expected
        )
        ours = [e for e in newer if e.envelope.event_id == envelopes[0].event_id]
        if ours:
            mine = newer[newer.index(ours[0]) : newer.index(ours[0]) + len(envelopes)]
            return AppendResult(position=mine[-1].position, events=tuple(mine))
        if idempotency_key and any(e.envelope.idempotency_key == idempotency_key for e in newer):
            return AppendResult(position=expected, events=(), duplicate=True)
        return None

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        """The events after `after`, and the position to append at next.

        A message on the aggregate's subjects that is no event (garbage, or a forged
        envelope) is skipped, but the position passes it: the stream holds it, so an
        append expecting an earlier position would be refused forever.

        `from_leader`: answered by the stream's leader, one message at a time. A direct get
        may be answered by any replica of a replicated stream, and a replica that is
        catching up (after a restart) answers with what it has: reads are not
        read-your-writes. A decision that must not rest on a stale read, such as refusing a
        command for good, is checked again with this slower read first.

        A read the server does not answer in time is asked again, within the appends'
        retry budget; `StoreTimeout` once it is spent.
        """
        return await self._read_retry.call(_timed_out, self._fetch_once, read)

    async def _fetch_once(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        family = self.subject(read.tenant_id, read.aggregate, read.aggregate_id)
        after = read.after or Position()
        if read.from_leader:
            return await self._read_from_leader(self.stream_of(read.aggregate_id), family, after)
        return await self._reads_of(read.aggregate_id).after(family, after)

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

    async def newest(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        before: RecordedEvent,
        types: frozenset[str],
        match: Callable[[RecordedEvent], bool] = lambda _: True,
    ) -> RecordedEvent | None:
        """The aggregate's newest event before its event `before` of one of `types` that
        `match`es (None when none does), read back from `before`: the events since the one
        found are read, not the aggregate's history (`AggregateReads.newest`)."""
        family = self.subject(tenant_id, aggregate, aggregate_id)
        return await self._reads_of(aggregate_id).newest(family, before, types, match)

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


def _timed_out(error: Exception) -> bool:
    return isinstance(error, StoreTimeout | nats.errors.TimeoutError)
