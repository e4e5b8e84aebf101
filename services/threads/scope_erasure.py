"""Erasures by scope: an end user's threads, an agency with its threads (docs/data.md).

A request is recorded first on the tenant's aggregate (`end_user.forget_requested`,
`agency.deletion_requested`: who asked; when, in the envelope). `carry_out` does it: each
root thread in scope (its `thread.created` names the end user, or is of the agency) is
deleted with its subagent tree as `DELETE /threads/{threadId}` deletes it
(`erasure.delete_tree`); then the request is recorded done, once: `end_user.forgotten` on
the tenant's aggregate, or `agency.deleted` as the agency's last event. The API carries out
the request it records at once; the durable `erasures` consumer (`agency serve webhooks`)
carries out every request too, so one stopped half-way (a process killed) is finished from
the log. Each step is harmless to repeat: a tree deleted already is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import nats.js.errors

from agency.contracts.codec import decode_event
from agency.contracts.events import (
    AgencyDeleted,
    AgencyDeletionRequested,
    EndUserForgetRequested,
    EndUserForgotten,
    TenantDeletionRequested,
    ThreadCreated,
    ThreadDeleted,
)
from agency.contracts.events.erasure import ErasureEvent
from agency.contracts.subjects import (
    EVENT_TYPE_HEADER,
    Aggregate,
)
from agency.infra.jetstream.aggregate_reads import scan_from
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.threads.erasure import delete_tree
from agency.services.threads.reads import Creation, thread_creations
from agency.services.threads.tree import descendants

_APPEND_ATTEMPTS = 10
_DELETED = frozenset({"thread.deleted"})
_SCAN_TIMEOUT = 5.0
AGENCY_DELETED = "agency.deleted"


@dataclass(frozen=True, slots=True)
class Erased:
    """A request, and the root threads it deleted once done."""

    request: RecordedEvent
    threads: tuple[str, ...]
    # Its record of being done (`end_user.forgotten`, `agency.deleted`), after every
    # tombstone of it: the read models have dropped the threads' rows once they passed it.
    stream_seq: int


async def request_erasure(
    bus: Bus,
    tenant_id: str,
    payload: EndUserForgetRequested | AgencyDeletionRequested | TenantDeletionRequested,
) -> RecordedEvent:
    """Record the request on the tenant's aggregate; its event."""
    (event,) = await _append(bus, tenant_id, "tenant", tenant_id, payload)
    return event


async def carry_out(bus: Bus, request: RecordedEvent) -> Erased:
    """Delete every thread in the request's scope, then record it done (once)."""
    payload = request.payload
    earlier = await _recorded_done(bus, request)
    if earlier is not None:
        await _delete_late(bus, request)
        return earlier
    match payload:
        case EndUserForgetRequested(end_user_id=end_user):

            def in_scope(c: Creation) -> bool:
                created = c.event.payload
                return isinstance(created, ThreadCreated) and created.end_user_id == end_user

        case AgencyDeletionRequested(agency_id=agency_id):

            def in_scope(c: Creation) -> bool:
                return c.event.envelope.agency_id == agency_id

        case _:
            raise TypeError(f"{request.type} is no erasure request")
    readable = await _delete_in_scope(bus, request, in_scope)
    # A tree this request deleted before it was stopped has no readable creation left
    # (its key is gone): its tombstones name the request.
    roots = tuple(dict.fromkeys([*await _deleted_for(bus, request), *readable]))
    done = await _record_done(bus, request, roots)
    await _delete_late(bus, request)
    return done


async def _delete_in_scope(
    bus: Bus, request: RecordedEvent, in_scope: Callable[[Creation], bool]
) -> list[str]:
    """Delete the tree of every readable root thread in scope; the roots."""
    tenant_id, request_id = request.envelope.tenant_id, request.envelope.event_id
    payload = request.payload
    assert isinstance(payload, EndUserForgetRequested | AgencyDeletionRequested)
    creations = await thread_creations(bus.nc, tenant_id, layout=bus.layout)
    readable = [c.thread_id for c in creations if c.parent_id is None and in_scope(c)]
    for root in readable:
        tree = [root, *(child for child, _, _ in descendants(creations, root))]
        await delete_tree(bus, tenant_id, root, tree, payload.requested_by, request_id=request_id)
    return readable


async def _delete_late(bus: Bus, request: RecordedEvent) -> None:
    """An agency's threads created while its deletion ran (after the threads were listed,
    before `agency.deleted` was written, from when the registry refuses new ones) are
    deleted too, at the same request: no thread of a deleted agency stays readable."""
    if isinstance(request.payload, AgencyDeletionRequested):
        agency_id = request.payload.agency_id
        await _delete_in_scope(bus, request, lambda c: c.event.envelope.agency_id == agency_id)


async def _deleted_for(bus: Bus, request: RecordedEvent) -> list[str]:
    """The root threads whose tombstones name the request, in the order written (all are
    after it on the log)."""
    tenant_id, request_id = request.envelope.tenant_id, request.envelope.event_id
    layout = bus.layout
    # The request's own stream is read from its position; another partition's sequences
    # are its own, so it is read from its start.
    own = layout.stream_of(tenant_id)
    roots: list[str] = []
    for partition in range(layout.partitions):
        stream = layout.stream(partition)
        start = request.stream_seq if stream == own else 1
        pattern = layout.aggregate_filter("thread", tenant_id, partition)
        async for event in scan_from(bus.nc, stream, pattern, start, _SCAN_TIMEOUT, types=_DELETED):
            payload = event.payload if isinstance(event, RecordedEvent) else None
            if isinstance(payload, ThreadDeleted) and payload.request_id == request_id:
                roots.append(payload.root_thread_id)
    return roots


async def _recorded_done(bus: Bus, request: RecordedEvent) -> Erased | None:
    """The request's record of being done, if written (for an agency: its deletion, by
    whichever request). Its position is past every tombstone of the request: the read
    models have dropped the threads' rows once they passed it."""
    tenant_id, request_id = request.envelope.tenant_id, request.envelope.event_id
    match request.payload:
        case EndUserForgetRequested():
            for event in await bus.store.read(tenant_id, "tenant", tenant_id):
                done = event.payload
                if isinstance(done, EndUserForgotten) and done.request_id == request_id:
                    return Erased(request, done.threads, event.stream_seq)
        case AgencyDeletionRequested(agency_id=agency_id):
            subject = bus.store.subject(tenant_id, "agency", agency_id)
            try:
                msg = await bus.js.get_last_msg(
                    bus.store.stream_of(agency_id), subject, direct=True
                )
            except nats.js.errors.NotFoundError:
                return None
            if (msg.headers or {}).get(EVENT_TYPE_HEADER) != AGENCY_DELETED:
                return None
            deleted = decode_event(msg.data or b"").payload
            assert isinstance(deleted, AgencyDeleted)
            return Erased(request, deleted.threads, msg.seq or request.stream_seq)
    return None


async def _record_done(bus: Bus, request: RecordedEvent, roots: tuple[str, ...]) -> Erased:
    """Record the request done unless it is: each carrier of a request (the API process
    that recorded it, the `erasures` consumer) gets here, and one record is written. The
    record is looked for once the aggregate's position is read, so one written meanwhile
    fails the append and the next look finds it."""
    tenant_id, request_id = request.envelope.tenant_id, request.envelope.event_id
    record: ErasureEvent
    match request.payload:
        case EndUserForgetRequested(end_user_id=end_user):
            aggregate: Aggregate = "tenant"
            aggregate_id = tenant_id
            record = EndUserForgotten(end_user_id=end_user, request_id=request_id, threads=roots)
        case AgencyDeletionRequested(agency_id=agency_id, requested_by=who):
            aggregate, aggregate_id = "agency", agency_id
            record = AgencyDeleted(request_id=request_id, requested_by=who, threads=roots)
        case _:
            raise TypeError(f"{request.type} is no erasure request")
    for _ in range(_APPEND_ATTEMPTS):
        position = await bus.store.last_position(tenant_id, aggregate, aggregate_id)
        earlier = await _recorded_done(bus, request)
        if earlier is not None:
            return earlier
        try:
            done = await bus.store.append(
                tenant_id, aggregate, aggregate_id, [record], expected=position
            )
        except ConcurrencyError:
            continue  # another writer of the aggregate went first
        return Erased(request, roots, done.events[-1].stream_seq)
    raise ConcurrencyError(f"{aggregate} {aggregate_id}", 0, None)


async def _append(
    bus: Bus, tenant_id: str, aggregate: Aggregate, aggregate_id: str, payload: ErasureEvent
) -> list[RecordedEvent]:
    for _ in range(_APPEND_ATTEMPTS):
        position = await bus.store.last_position(tenant_id, aggregate, aggregate_id)
        try:
            done = await bus.store.append(
                tenant_id, aggregate, aggregate_id, [payload], expected=position
            )
        except ConcurrencyError:
            continue  # another writer of the aggregate went first
        return list(done.events)
    raise ConcurrencyError(f"{aggregate} {aggregate_id}", 0, None)
