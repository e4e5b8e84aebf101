"""What code that decides on aggregates needs of an event store.

`EventStore` is the JetStream one; the replay's in-memory store is another, so the same
runtime code runs live and in re-execution. Callers use `append`, `read`, `read_positioned`
and `last_position`; a store that subclasses `AggregateStore` implements what they come to:
`write` an `Append`, `fetch` an `AggregateRead`, and `last_position`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from agency.contracts.events import AnyEvent
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.records import AppendResult, EventContext, Position, RecordedEvent


@dataclass(frozen=True, slots=True)
class Append:
    """The events of one decision, to append to one aggregate after `expected`.

    `idempotency_key`: a repeat of the same append is stored once. `keyed`: how many of the
    first events the key and the context's causation belong to (a command's decision, stored
    with what follows from it); all of them when None.
    """

    tenant_id: str
    aggregate: Aggregate
    aggregate_id: str
    payloads: Sequence[AnyEvent]
    expected: Position
    context: EventContext | None = None
    idempotency_key: str | None = None
    keyed: int | None = None


@dataclass(frozen=True, slots=True)
class AggregateRead:
    """A read of one aggregate's events after `after` (None: from the start); `from_leader`:
    answered by the stream's leader, never by a replica catching up."""

    tenant_id: str
    aggregate: Aggregate
    aggregate_id: str
    after: Position | None = None
    from_leader: bool = False

    def continued_after(self, after: Position) -> AggregateRead:
        """The same read, after `after`."""
        return replace(self, after=after)


class AggregateStore(Protocol):
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
        """Append the events of one decision after `expected`, atomically (`Append`)."""
        return await self.write(
            Append(
                tenant_id, aggregate, aggregate_id, payloads,
                expected=expected, context=context, idempotency_key=idempotency_key, keyed=keyed,
            )
        )  # fmt: skip

    async def read(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
    ) -> list[RecordedEvent]:
        """Every event of one aggregate after `after` (default: from the start), in order:
        what `read_positioned` reads."""
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
        """The events after `after`, and the position to append at next."""
        return await self.fetch(
            AggregateRead(tenant_id, aggregate, aggregate_id, after, from_leader)
        )

    async def write(self, append: Append) -> AppendResult: ...

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]: ...

    async def last_position(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> Position: ...


class DelegatingStore(AggregateStore):
    """An `AggregateStore` that hands every call to `inner`: a base for a store that changes
    one call (a cache of some reads, say) and leaves the others as they are."""

    def __init__(self, inner: AggregateStore) -> None:
        self.inner = inner

    async def write(self, append: Append) -> AppendResult:
        return await self.inner.write(append)

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        return await self.inner.fetch(read)

    async def last_position(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> Position:
        return await self.inner.last_position(tenant_id, aggregate, aggregate_id)
