"""What code that decides on aggregates needs of an event store.

`EventStore` is the JetStream one; the replay's in-memory store is another, so the same
runtime code runs live and in re-execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agency.contracts.events import AnyEvent
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.records import AppendResult, EventContext, Position, RecordedEvent


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
    ) -> AppendResult: ...

    async def read(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
    ) -> list[RecordedEvent]: ...

    async def read_positioned(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
        from_leader: bool = False,
    ) -> tuple[list[RecordedEvent], Position]: ...

    async def last_position(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> Position: ...


class DelegatingStore:
    """An `AggregateStore` that hands every call to `inner`: a base for a store that changes
    one call (a cache of some reads, say) and leaves the others as they are."""

    def __init__(self, inner: AggregateStore) -> None:
        self.inner = inner

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
        return await self.inner.append(
            tenant_id, aggregate, aggregate_id, payloads,
            expected=expected, context=context, idempotency_key=idempotency_key, keyed=keyed,
        )  # fmt: skip

    async def read(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
    ) -> list[RecordedEvent]:
        """What `read_positioned` reads (so a subclass changes reads in one place)."""
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
        return await self.inner.read_positioned(
            tenant_id, aggregate, aggregate_id, after=after, from_leader=from_leader
        )

    async def last_position(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> Position:
        return await self.inner.last_position(tenant_id, aggregate, aggregate_id)
