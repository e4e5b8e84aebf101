"""Deleting a thread: its tree's data keys destroyed, a `thread.deleted` on each of its
threads (docs/data.md).

The log is append-only: what a deletion removes is the key, so every copy of the sealed
events (the stream, its replicas, its backups) is unreadable for good. The tombstone says
who asked and when; reads of a deleted thread answer with it (`ThreadGone`, HTTP 410). The
read models drop the tree's rows when their projections reach the tombstone
(`projections/erasure.py`), which also destroys the key again: a deletion stopped between
its tombstones and its key is finished there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import nats.js.errors
import structlog

from agency.contracts.codec import decode_event
from agency.contracts.events import ThreadDeleted
from agency.contracts.subjects import EVENT_TYPE_HEADER
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.infra.keystore import current_cipher

log = structlog.get_logger(__name__)

DELETED = "thread.deleted"
_APPEND_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class Deletion:
    """A thread's deletion as its tombstone tells it."""

    thread_id: str
    root_thread_id: str
    deleted_at: datetime
    requested_by: str
    tree: tuple[str, ...]
    stream_seq: int


class ThreadGone(Exception):
    """The thread was deleted: answered 410 with when and at whose request."""

    def __init__(self, deletion: Deletion) -> None:
        self.deletion = deletion
        super().__init__(
            f"thread {deletion.thread_id} was deleted at {deletion.deleted_at.isoformat()} "
            f"at the request of {deletion.requested_by}"
        )


async def deletion_of(bus: Bus, tenant_id: str, thread_id: str) -> Deletion | None:
    """The thread's tombstone, if it has one: one direct get of the last event on its
    subject. A tombstone is a thread's last event: it is appended after the thread's last
    position, and nothing is appended after it (a writer that finds it has nothing to do,
    and the tree's keys are destroyed next)."""
    subject = bus.store.subject(tenant_id, "thread", thread_id)
    try:
        msg = await bus.js.get_last_msg(bus.store.stream_of(thread_id), subject, direct=True)
    except nats.js.errors.NotFoundError:
        return None
    if (msg.headers or {}).get(EVENT_TYPE_HEADER) != DELETED:
        return None
    envelope = decode_event(msg.data or b"")
    payload = envelope.payload
    assert isinstance(payload, ThreadDeleted)
    return Deletion(
        thread_id=thread_id,
        root_thread_id=payload.root_thread_id,
        deleted_at=envelope.ts,
        requested_by=payload.requested_by,
        tree=payload.tree,
        stream_seq=msg.seq or 0,
    )


async def refuse_if_deleted(bus: Bus, tenant_id: str, thread_id: str) -> None:
    """Raises `ThreadGone` when the thread was deleted (for a read that found nothing)."""
    deletion = await deletion_of(bus, tenant_id, thread_id)
    if deletion is not None:
        raise ThreadGone(deletion)


async def delete_tree(
    bus: Bus,
    tenant_id: str,
    root_thread_id: str,
    tree: Sequence[str],
    requested_by: str,
    *,
    request_id: str | None = None,
) -> list[RecordedEvent]:
    """Tombstones on every thread of the tree (children first, the root last), then the
    tree's data key destroyed. A thread deleted already keeps its first tombstone.
    `request_id`: the erasure by scope this is part of (`scope_erasure.py`)."""
    threads = [*sorted(set(tree) - {root_thread_id}), root_thread_id]
    payload = ThreadDeleted(
        requested_by=requested_by,
        root_thread_id=root_thread_id,
        tree=tuple(threads),
        request_id=request_id,
    )
    written: list[RecordedEvent] = []
    for thread_id in threads:
        written += await _append(bus, tenant_id, thread_id, payload)
    cipher = current_cipher()
    if cipher is not None:
        # The tree's events are sealed with the root's key, each thread's commands with
        # its own: all of them go.
        for key_id in {root_thread_id, *threads}:
            await cipher.destroy(tenant_id, key_id)
    log.info("thread deleted", tenant_id=tenant_id, thread_id=root_thread_id, tree=len(threads))
    return written


async def _append(
    bus: Bus, tenant_id: str, thread_id: str, payload: ThreadDeleted
) -> list[RecordedEvent]:
    """The tombstone appended after the thread's last event, unless it has one: looked at
    once its position is read, so a tombstone written meanwhile (an API process and the
    `erasures` consumer carry out one request at once) fails the append, and the next look
    finds it."""
    context = EventContext(thread_id=thread_id, correlation_id=payload.root_thread_id)
    for _ in range(_APPEND_ATTEMPTS):
        position = await bus.store.last_position(tenant_id, "thread", thread_id)
        if await deletion_of(bus, tenant_id, thread_id) is not None:
            return []
        try:
            done = await bus.store.append(
                tenant_id, "thread", thread_id, [payload], expected=position, context=context
            )
        except ConcurrencyError:
            continue  # the thread moved on meanwhile: a run writing, or another deletion
        return list(done.events)
    raise ConcurrencyError(f"thread {thread_id}", 0, None)
