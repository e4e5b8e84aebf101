"""Reading threads and thread trees from JetStream, never from a read model.

A thread's history is one subject family, read with the event store's batch direct gets.
Children are found by their `thread.created` events: one wildcard direct-get scan over the
tenant's `thread_created` subjects, answered from the server's subject index.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.aio.client import Client as NATS

from contracts.events import ThreadCreated
from contracts.ids import validate_token
from contracts.subjects import EVENTS_STREAM, event_token
from infra.jetstream.aggregate_reads import direct_batch
from infra.jetstream.decoding import decode_recorded
from infra.jetstream.eventstore import EventStore
from infra.jetstream.records import RecordedEvent, UndecodableEvent

_PAGE = 1000


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


async def thread_creations(
    nc: NATS,
    tenant_id: str,
    *,
    start_seq: int = 1,
    until_seq: int | None = None,
    stream: str = EVENTS_STREAM,
    timeout: float = 5.0,
) -> list[Creation]:
    """Every `thread.created` of the tenant from `start_seq` (to `until_seq`), in order."""
    token = event_token("thread.created")
    pattern = f"tenant.{validate_token('tenant id', tenant_id)}.evt.thread.*.{token}"
    found: list[Creation] = []
    async for stream_seq, subject, data in _scan(nc, stream, pattern, start_seq, timeout):
        if until_seq is not None and stream_seq > until_seq:
            break
        creation = _creation(tenant_id, stream_seq, subject, data)
        if creation is not None:
            found.append(creation)
    return found


def _creation(tenant_id: str, stream_seq: int, subject: str, data: bytes) -> Creation | None:
    # As the event store reads: an envelope naming another thread or tenant than its
    # subject (what the broker confines to a tenant) is not believed.
    event = decode_recorded(data, stream_seq, subject)
    if isinstance(event, UndecodableEvent) or event.envelope.tenant_id != tenant_id:
        return None
    payload = event.payload
    if not isinstance(payload, ThreadCreated):
        return None
    parent = payload.parent.thread_id if payload.parent else None
    return Creation(
        thread_id=event.envelope.aggregate_id, stream_seq=stream_seq, parent_id=parent, event=event
    )


async def _scan(
    nc: NATS, stream: str, pattern: str, start: int, timeout: float
) -> AsyncIterator[tuple[int, str, bytes]]:
    """(stream seq, subject, data) of every message matching `pattern` from `start`."""
    while True:
        request = {"seq": start, "next_by_subj": pattern, "batch": _PAGE}
        count = 0
        last = start
        async for msg in direct_batch(nc, stream, request, timeout):
            headers = msg.headers or {}
            last = int(headers.get("Nats-Sequence", "0"))
            count += 1
            yield last, headers.get("Nats-Subject", ""), msg.data
        if count < _PAGE:
            return
        start = last + 1
