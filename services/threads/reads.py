"""Reading threads and thread trees from JetStream, never from a read model.

A thread's history is one subject family, read with the event store's batch direct gets.
Children are found by their `thread.created` events: one wildcard direct-get scan over the
tenant's `thread_created` subjects, answered from the server's subject index.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nats.aio.client import Client as NATS

from agency.contracts.events import ThreadCreated
from agency.contracts.partitions import EventLayout
from agency.contracts.subjects import EVENTS_STREAM, aggregate_events_filter
from agency.infra.jetstream.aggregate_reads import scan_from
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent


class ThreadNotFound(Exception):
    def __init__(self, tenant_id: str, thread_id: str) -> None:
        self.tenant_id = tenant_id
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id} has no events in tenant {tenant_id}: check the id and --tenant"
        )


@dataclass(frozen=True, slots=True)
class Creation:
    """A thread's `thread.created`, as needed to place it in a tree."""

    thread_id: str
    stream_seq: int
    parent_id: str | None
    event: RecordedEvent


async def read_thread(store: EventStore, tenant_id: str, thread_id: str) -> list[RecordedEvent]:
    events = await store.read(tenant_id, "thread", thread_id)
    if not events:
        raise ThreadNotFound(tenant_id, thread_id)
    return events


_CREATED = frozenset({"thread.created"})


async def thread_creations(
    nc: NATS,
    tenant_id: str,
    *,
    start_seq: int = 1,
    until_seq: int | None = None,
    stream: str = EVENTS_STREAM,
    timeout: float = 5.0,
    layout: EventLayout | None = None,
    until_time: datetime | None = None,
) -> list[Creation]:
    """Every `thread.created` of the tenant from `start_seq` (to `until_seq`), in order.

    On a log of several partitions (`layout`), a tree's threads lie in any of them and
    one stream's sequences say nothing of another's: every partition is read from its
    start, the creations kept up to `until_time` and put in the order of their times."""
    if layout is not None and layout.partitioned:
        return await _partitioned_creations(nc, tenant_id, layout, timeout, until_time)
    pattern = aggregate_events_filter("thread", tenant_id)
    found: list[Creation] = []
    async for event in scan_from(nc, stream, pattern, start_seq, timeout, types=_CREATED):
        if until_seq is not None and event.stream_seq > until_seq:
            break
        creation = _creation(tenant_id, event)
        if creation is not None:
            found.append(creation)
    return found


async def _partitioned_creations(
    nc: NATS,
    tenant_id: str,
    layout: EventLayout,
    timeout: float,
    until_time: datetime | None,
) -> list[Creation]:
    found: list[Creation] = []
    for partition in range(layout.partitions):
        pattern = layout.aggregate_filter("thread", tenant_id, partition)
        stream = layout.stream(partition)
        async for event in scan_from(nc, stream, pattern, 1, timeout, types=_CREATED):
            creation = _creation(tenant_id, event)
            if creation is None:
                continue
            if until_time is None or creation.event.envelope.ts <= until_time:
                found.append(creation)
    found.sort(key=lambda c: c.event.envelope.ts)
    return found


def _creation(tenant_id: str, event: RecordedEvent | UndecodableEvent) -> Creation | None:
    # Decoded as the event store reads: an envelope naming another thread or tenant than
    # its subject (what the broker confines to a tenant) is not believed.
    if isinstance(event, UndecodableEvent) or event.envelope.tenant_id != tenant_id:
        return None
    payload = event.payload
    if not isinstance(payload, ThreadCreated):
        return None
    parent = payload.parent.thread_id if payload.parent else None
    return Creation(
        thread_id=event.envelope.aggregate_id,
        stream_seq=event.stream_seq,
        parent_id=parent,
        event=event,
    )
