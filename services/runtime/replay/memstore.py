"""An in-memory event store: what the runtime's `ThreadDriver` needs of `EventStore`.

`ThreadDriver`, `ThreadCache` and `BlueprintCache` use `append` (with an expected
`Position`, raising `ConcurrencyError` when the aggregate moved), `read(after=)` and
`last_position`; this store (an `AggregateStore`: `write`, `fetch` and `last_position`)
answers those with the same semantics, in memory, so a
re-execution never writes to the live log. Recorded events are brought in with `copy`,
which keeps their envelopes (ids, causation, idempotency key) and marks them as copies,
so what the runtime produced during a re-execution is told apart from what was given.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.subjects import Aggregate, event_subject
from agency.infra.jetstream.envelopes import encode_checked, new_envelopes
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.ports import AggregateRead, AggregateStore, Append
from agency.infra.jetstream.records import AppendResult, Position, RecordedEvent

Key = tuple[str, str, str]
BeforeAppend = Callable[[str, str, str], None]


class MemoryEventStore(AggregateStore):
    """Aggregates in memory with one stream sequence across all of them, as on the broker.

    `before_append(tenant, aggregate, id)` runs before every `append` is checked: a
    re-execution uses it to let recorded outside writes land first, exactly where the live
    runtime lost such races.
    """

    def __init__(self, *, before_append: BeforeAppend | None = None) -> None:
        self.before_append = before_append
        self._aggregates: dict[Key, list[RecordedEvent]] = {}
        self._stream_seqs: dict[Key, list[int]] = {}
        self._last_stream_seq = 0
        self._copies: set[str] = set()

    @property
    def last_stream_seq(self) -> int:
        return self._last_stream_seq

    async def write(self, append: Append) -> AppendResult:
        if not append.payloads:
            return AppendResult(position=append.expected, events=())
        key = (append.tenant_id, append.aggregate, append.aggregate_id)
        if self.before_append is not None:
            self.before_append(*key)
        events = self._aggregates.get(key, [])
        if append.idempotency_key is not None and any(
            e.envelope.idempotency_key == append.idempotency_key for e in events
        ):
            return AppendResult(position=append.expected, events=(), duplicate=True)
        current = events[-1].position if events else Position()
        if current.stream_seq != append.expected.stream_seq:
            family = event_subject(*key)
            raise ConcurrencyError(family, append.expected.stream_seq, current.stream_seq)
        envelopes = new_envelopes(append)
        recorded = self._store(key, envelopes, encode_checked(envelopes))
        return AppendResult(position=recorded[-1].position, events=recorded)

    def copy(self, envelopes: Sequence[Envelope]) -> tuple[RecordedEvent, ...]:
        """Store recorded events as they are, renumbered after each aggregate's last event."""
        stored: list[RecordedEvent] = []
        for envelope in envelopes:
            key = (envelope.tenant_id, envelope.aggregate, envelope.aggregate_id)
            events = self._aggregates.get(key, [])
            seq = events[-1].seq + 1 if events else 1
            stored.extend(self._store(key, [msgspec.structs.replace(envelope, seq=seq)]))
            self._copies.add(envelope.event_id)
        return tuple(stored)

    def _store(
        self, key: Key, envelopes: Sequence[Envelope], bodies: Sequence[bytes] = ()
    ) -> tuple[RecordedEvent, ...]:
        events = self._aggregates.setdefault(key, [])
        seqs = self._stream_seqs.setdefault(key, [])
        recorded: list[RecordedEvent] = []
        for i, envelope in enumerate(envelopes):
            self._last_stream_seq += 1
            subject = event_subject(key[0], key[1], key[2])
            event = RecordedEvent(
                envelope=envelope,
                stream_seq=self._last_stream_seq,
                subject=subject,
                raw=bodies[i] if bodies else b"",
            )
            events.append(event)
            seqs.append(event.stream_seq)
            recorded.append(event)
        return tuple(recorded)

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        # One process, one copy: every read is the leader's.
        after = read.after or Position()
        events = self.since(read.tenant_id, read.aggregate, read.aggregate_id, after)
        return events, events[-1].position if events else after

    def since(
        self, tenant_id: str, aggregate: str, aggregate_id: str, after: Position
    ) -> list[RecordedEvent]:
        """`read` without the await, for callers inside a synchronous hook."""
        key = (tenant_id, aggregate, aggregate_id)
        events = self._aggregates.get(key, [])
        start = bisect.bisect_right(self._stream_seqs.get(key, []), after.stream_seq)
        return events[start:]

    async def last_position(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> Position:
        events = self._aggregates.get((tenant_id, aggregate, aggregate_id))
        return events[-1].position if events else Position()

    def events(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> list[RecordedEvent]:
        return list(self._aggregates.get((tenant_id, aggregate, aggregate_id), []))

    def is_copy(self, event: RecordedEvent) -> bool:
        return event.envelope.event_id in self._copies
