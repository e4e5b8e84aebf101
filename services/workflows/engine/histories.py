"""Workflow histories kept between decisions, so a decision on a long-lived workflow (an
`@global` that grows by every message) reads only what was appended since its last look.

The log is append-only and an aggregate's events are read in order after a position, so a
kept history is always a prefix of the aggregate's log: reading on from where it ends gives
the whole. Only workflows are kept, the least recently used beyond `capacity` forgotten;
every other read, and every append, goes to the store as it is.
"""

from __future__ import annotations

from collections import OrderedDict

from agency.infra.jetstream.ports import AggregateRead, AggregateStore, DelegatingStore
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

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        if read.aggregate != "workflow" or read.after is not None or read.from_leader:
            return await self.inner.fetch(read)
        key = (read.tenant_id, read.aggregate_id)
        kept, position = self._kept.pop(key, ([], Position()))
        more, position = await self.inner.fetch(read.continued_after(position))
        history = kept + more
        self._kept[key] = (history, position)
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        return list(history), position
