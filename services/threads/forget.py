"""Forgetting an end user: every thread created for them deleted (docs/data.md).

`request_forget` records the request on the tenant's aggregate (`end_user.forget_requested`,
who asked; when, in the envelope). `forget` carries it out: each root thread whose
`thread.created` names the end user is deleted with its subagent tree as
`DELETE /threads/{threadId}` deletes it (`erasure.delete_tree`), then `end_user.forgotten`
records the threads deleted. The API carries out the request it records at once; the
durable `erasures` consumer (`agency serve webhooks`) carries out every request too, so one
stopped half-way (a process killed) is finished from the log. Both are harmless to repeat:
a tree deleted already is skipped, and a request is recorded done once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agency.contracts.events import EndUserForgetRequested, EndUserForgotten, ThreadCreated
from agency.contracts.events.erasure import ErasureEvent
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import RecordedEvent
from agency.services.threads.erasure import delete_tree
from agency.services.threads.reads import thread_creations
from agency.services.threads.tree import descendants

FORGET_REQUESTED = "end_user.forget_requested"
_APPEND_ATTEMPTS = 10


@dataclass(frozen=True, slots=True)
class Forgotten:
    """A request to forget an end user, and what it deleted once done."""

    request: RecordedEvent
    threads: tuple[str, ...]
    # The last event written for it: the read models have dropped the threads' rows once
    # they passed it.
    stream_seq: int


async def request_forget(
    bus: Bus, tenant_id: str, end_user_id: str, requested_by: str
) -> RecordedEvent:
    """Record the request on the tenant's aggregate; its event."""
    payload = EndUserForgetRequested(end_user_id=end_user_id, requested_by=requested_by)
    (event,) = await _append(bus, tenant_id, [payload])
    return event


async def forget(bus: Bus, request: RecordedEvent) -> Forgotten:
    """Delete every thread of the request's end user, then record it done (once)."""
    payload = request.payload
    assert isinstance(payload, EndUserForgetRequested)
    tenant_id = request.envelope.tenant_id
    earlier = await _done(bus, tenant_id, request.envelope.event_id)
    if earlier is not None:
        return Forgotten(request, earlier.threads, request.stream_seq)
    creations = await thread_creations(bus.nc, tenant_id)
    roots = [
        c.thread_id
        for c in creations
        if c.parent_id is None
        and isinstance(c.event.payload, ThreadCreated)
        and c.event.payload.end_user_id == payload.end_user_id
    ]
    last = request.stream_seq
    for root in roots:
        tree = [root, *(child for child, _, _ in descendants(creations, root))]
        written = await delete_tree(bus, tenant_id, root, tree, payload.requested_by)
        last = max([last, *(e.stream_seq for e in written)])
    done = EndUserForgotten(
        end_user_id=payload.end_user_id,
        request_id=request.envelope.event_id,
        threads=tuple(roots),
    )
    if await _done(bus, tenant_id, request.envelope.event_id) is None:
        last = max([last, *(e.stream_seq for e in await _append(bus, tenant_id, [done]))])
    return Forgotten(request, tuple(roots), last)


async def _done(bus: Bus, tenant_id: str, request_id: str) -> EndUserForgotten | None:
    for event in await bus.store.read(tenant_id, "tenant", tenant_id):
        if isinstance(event.payload, EndUserForgotten) and event.payload.request_id == request_id:
            return event.payload
    return None


async def _append(
    bus: Bus, tenant_id: str, payloads: Sequence[ErasureEvent]
) -> list[RecordedEvent]:
    for _ in range(_APPEND_ATTEMPTS):
        position = await bus.store.last_position(tenant_id, "tenant", tenant_id)
        try:
            done = await bus.store.append(
                tenant_id,
                "tenant",
                tenant_id,
                payloads,
                expected=position,
            )
        except ConcurrencyError:
            continue  # the registry wrote to the tenant meanwhile
        return list(done.events)
    raise ConcurrencyError(f"tenant {tenant_id}", 0, None)


class ForgetRequests:
    """The handler of the durable `erasures`: carries out each request it reads."""

    def __init__(self, bus: Bus) -> None:
        self._bus = bus

    async def handle(self, event: RecordedEvent) -> None:
        if isinstance(event.payload, EndUserForgetRequested):
            await forget(self._bus, event)
