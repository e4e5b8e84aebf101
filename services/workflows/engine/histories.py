"""Workflow histories kept between decisions, so a decision on a long-lived workflow (an
`@global` that grows by every message) reads only what was appended since its last look.

The log is append-only and an aggregate's events are read in order after a position, so a
kept history is always a prefix of the aggregate's log: reading on from where it ends gives
the whole. Only workflows are kept, the least recently used beyond `capacity` forgotten;
every other read, and every append, goes to the store as it is.
"""

from __future__ import annotations

from collections import OrderedDict

from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.ports import AggregateStore, DelegatingStore
from agency.infra.jetstream.records import Position, RecordedEvent

# Workflows whose history is kept; each is as long as its log.
CAPACITY = 128


class WorkflowHistories(DelegatingStore):
    """An `AggregateStore` over `store` that keeps the workflows' histories it read."""

    def __init__(self, store: AggregateStore, capacity: int = CAPACITY) -> None:
        super().__init__(store)
        self._capacity = capacity
        self._kept: OrderedDict[tuple[str, str], tuple[list[RecordedEvent], Position]] = (
            OrderedDict()
        )

    async def read_positioned(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
        from_leader: bool = False,
    ) -> tuple[list[RecordedEvent], Position]:
        if aggregate != "workflow" or after is not None or from_leader:
            return await self.inner.read_positioned(
                tenant_id, aggregate, aggregate_id, after=after, from_leader=from_leader
            )
        key = (tenant_id, aggregate_id)
        kept, position = self._kept.pop(key, ([], Position()))
        more, position = await self.inner.read_positioned(
            tenant_id, aggregate, aggregate_id, after=position
        )
        history = kept + more
        self._kept[key] = (history, position)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        return list(history), position
