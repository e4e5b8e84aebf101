"""Reads the coordinator does not take from a lagging replica at their word.

A direct get may be answered by any replica of a replicated stream, and one catching up
after a restart answers with what it has (`EventStore.read_positioned`). Where a read
that misses what it looks for would drop a child's report or its first run for good (the
event that asked is acknowledged), the coordinator asks the stream's leader before it
believes the miss. These reads find what they look for on every usual delivery, so the
leader is asked only when a replica lags or the thing is really not there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from agency.contracts.records import RecordedEvent
from agency.infra.jetstream.ports import AggregateStore

T = TypeVar("T")


async def read_finding(
    store: AggregateStore,
    tenant: str,
    thread: str,
    find: Callable[[list[RecordedEvent]], T | None],
) -> tuple[list[RecordedEvent], T | None]:
    """The thread's history and what `find` finds in it; a miss read again from the
    leader before it is believed."""
    history = await store.read(tenant, "thread", thread)
    if (found := find(history)) is not None:
        return history, found
    history, _ = await store.read_positioned(tenant, "thread", thread, from_leader=True)
    return history, find(history)


async def read_through(
    store: AggregateStore, tenant: str, thread: str, event: RecordedEvent
) -> list[RecordedEvent]:
    """The thread's history up to `event` of its own at least (a replica's copy that ends
    before it is read again from the leader)."""
    history = await store.read(tenant, "thread", thread)
    if history and history[-1].stream_seq >= event.stream_seq:
        return history
    history, _ = await store.read_positioned(tenant, "thread", thread, from_leader=True)
    return history
