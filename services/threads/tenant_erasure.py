"""Deleting a whole tenant (docs/data.md, "Deleting a tenant").

The request is recorded first on the tenant's aggregate (`tenant.deletion_requested`: who
asked; when, in the envelope). `carry_out_tenant` does it: each agency of the tenant is
deleted as `DELETE /agencies/{agencyId}` deletes it (`scope_erasure.carry_out`); then every
live API key is revoked and `tenant.deleted` written, in one append, as the tenant's last
events; then the tenant's key is destroyed in the key store, so no data key it wraps (a
thread the deletion missed included) opens again; then its NATS user is removed, on a
server whose users Agency manages. The API carries out the request it
records at once; the durable `erasures` consumer carries out every request too, so one
stopped half-way is finished from the log. Each step is harmless to repeat.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol

import structlog

from agency.contracts.events import (
    AgencyDeletionRequested,
    AnyEvent,
    ApiKeyRevoked,
    EndUserForgetRequested,
    TenantDeleted,
    TenantDeletionRequested,
)
from agency.contracts.records import Position
from agency.domain.key_liveness import live_keys
from agency.infra.jetstream.aggregate_reads import scan_from
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.keystore import current_cipher
from agency.services.threads.scope_erasure import carry_out

log = structlog.get_logger(__name__)

_APPEND_ATTEMPTS = 10
_SCAN_TIMEOUT = 5.0
_CREATED = frozenset({"agency.created"})
# Within the store's atomic batch, with room for `tenant.deleted`.
_REVOKED_PER_APPEND = 500
# Looks at the tenant's agencies until none is left undeleted, at most this many times
# (an agency created meanwhile is found by the next; the tenant key covers one later still).
_AGENCY_PASSES = 3


class TenantUsers(Protocol):
    """The tenants' users of a NATS server whose users Agency manages
    (`infra/nats_auth.py` `CredentialIssuer`)."""

    def remove(self, tenant: str) -> bool:
        """Remove the tenant's user, if it has one; its connections are closed."""
        ...


@dataclass(frozen=True, slots=True)
class TenantErased:
    """The tenant's deletion: its request and its `tenant.deleted`."""

    request: RecordedEvent
    deleted: RecordedEvent

    @property
    def payload(self) -> TenantDeleted:
        assert isinstance(self.deleted.payload, TenantDeleted)
        return self.deleted.payload


async def deleted_tenant(bus: Bus, tenant_id: str) -> RecordedEvent | None:
    """The tenant's `tenant.deleted`, if it was deleted."""
    history = await bus.store.read(tenant_id, "tenant", tenant_id)
    return _deleted_in(history)


def _deleted_in(history: list[RecordedEvent]) -> RecordedEvent | None:
    return next((e for e in history if isinstance(e.payload, TenantDeleted)), None)


async def agencies_of(bus: Bus, tenant_id: str) -> list[str]:
    """Every agency the tenant ever created, from the log (a deleted one included)."""
    layout = bus.layout
    found: dict[str, None] = {}
    for partition in range(layout.partitions):
        pattern = layout.aggregate_filter("agency", tenant_id, partition)
        stream = layout.stream(partition)
        async for event in scan_from(bus.nc, stream, pattern, 1, _SCAN_TIMEOUT, types=_CREATED):
            if isinstance(event, RecordedEvent):
                found[event.envelope.aggregate_id] = None
    return list(found)


async def carry_out_tenant(
    bus: Bus, request: RecordedEvent, users: TenantUsers | None = None
) -> TenantErased:
    """Delete every agency of the tenant, revoke its keys and record it deleted (once),
    then destroy its key and remove its NATS user (from `users`, where Agency manages
    them), whichever process carries the deletion out."""
    payload = request.payload
    assert isinstance(payload, TenantDeletionRequested)
    tenant_id = request.envelope.tenant_id
    deleted = await deleted_tenant(bus, tenant_id)
    if deleted is None:
        agencies = await _delete_agencies(bus, tenant_id, payload.requested_by)
        deleted = await _record_deleted(bus, request, agencies)
    cipher = current_cipher()
    if cipher is not None:
        await cipher.destroy_tenant(tenant_id)
    if users is not None:
        # Its password stops working and its connections close at the servers' reload.
        await asyncio.to_thread(users.remove, tenant_id)
    log.info("tenant deleted", tenant_id=tenant_id, requested_by=payload.requested_by)
    return TenantErased(await _request_of(bus, request, deleted), deleted)


async def _request_of(bus: Bus, request: RecordedEvent, deleted: RecordedEvent) -> RecordedEvent:
    """The request `tenant.deleted` names: `request`, or another recorded at once (two
    deletions asked together), which the answer is then about."""
    assert isinstance(deleted.payload, TenantDeleted)
    if deleted.payload.request_id == request.envelope.event_id:
        return request
    tenant_id = request.envelope.tenant_id
    for event in await bus.store.read(tenant_id, "tenant", tenant_id):
        if event.envelope.event_id == deleted.payload.request_id:
            return event
    return request


async def _delete_agencies(bus: Bus, tenant_id: str, requested_by: str) -> tuple[str, ...]:
    """Every agency of the tenant deleted, as `DELETE /agencies/{agencyId}` deletes it; the
    log is looked at again until it shows none left (one created while the others were
    being deleted, by a key not yet revoked, is deleted too); all of them."""
    agencies: list[str] = []
    for _ in range(_AGENCY_PASSES):
        agencies = await agencies_of(bus, tenant_id)
        left = [a for a in agencies if not await _agency_deleted(bus, tenant_id, a)]
        if not left:
            break
        for agency_id in left:
            await carry_out(bus, await _agency_request(bus, tenant_id, agency_id, requested_by))
    return tuple(agencies)


async def _agency_request(
    bus: Bus, tenant_id: str, agency_id: str, requested_by: str
) -> RecordedEvent:
    """The agency's deletion request: the first one recorded, or one recorded now. Every
    carrier of the tenant's deletion carries out that one request, appended only where
    the tenant's log has none, so each tree it deletes (before a stop included) is named
    by it and counted in its record."""
    for _ in range(_APPEND_ATTEMPTS):
        history = await bus.store.read(tenant_id, "tenant", tenant_id)
        for event in history:
            payload = event.payload
            if isinstance(payload, AgencyDeletionRequested) and payload.agency_id == agency_id:
                return event
        asked = AgencyDeletionRequested(agency_id=agency_id, requested_by=requested_by)
        position = history[-1].position if history else Position()
        try:
            done = await bus.store.append(
                tenant_id, "tenant", tenant_id, [asked], expected=position
            )
        except ConcurrencyError:
            continue  # another writer of the tenant went first: look again
        return done.events[0]
    raise ConcurrencyError(f"tenant {tenant_id}", 0, None)


async def _agency_deleted(bus: Bus, tenant_id: str, agency_id: str) -> bool:
    events = await bus.store.read(tenant_id, "agency", agency_id)
    return any(e.type == "agency.deleted" for e in events)


async def _record_deleted(
    bus: Bus, request: RecordedEvent, agencies: tuple[str, ...]
) -> RecordedEvent:
    """Every live key revoked and `tenant.deleted` appended after them (in one append,
    the revocations of a tenant with very many keys in several before it), unless the
    tenant is deleted already (by another carrier of the request)."""
    tenant_id, request_id = request.envelope.tenant_id, request.envelope.event_id
    payload = request.payload
    assert isinstance(payload, TenantDeletionRequested)
    attempts = 0
    while attempts < _APPEND_ATTEMPTS:
        history = await bus.store.read(tenant_id, "tenant", tenant_id)
        earlier = _deleted_in(history)
        if earlier is not None:
            return earlier
        keys = tuple(live_keys(history))
        events: list[AnyEvent] = [ApiKeyRevoked(key_id=k) for k in keys[:_REVOKED_PER_APPEND]]
        last = len(keys) <= _REVOKED_PER_APPEND
        if last:
            revoked = (*_revoked_since(history, request.stream_seq), *keys)
            deleted = TenantDeleted(
                request_id=request_id,
                requested_by=payload.requested_by,
                agencies=agencies,
                api_keys=tuple(dict.fromkeys(revoked)),
            )
            events.append(deleted)
        position = history[-1].position if history else Position()
        try:
            done = await bus.store.append(tenant_id, "tenant", tenant_id, events, expected=position)
        except ConcurrencyError:
            attempts += 1
            continue  # another writer of the tenant went first
        if last:
            return done.events[-1]
    raise ConcurrencyError(f"tenant {tenant_id}", 0, None)


def _revoked_since(history: list[RecordedEvent], stream_seq: int) -> list[str]:
    """The keys revoked after the request (by an earlier append of its own)."""
    return [
        e.payload.key_id
        for e in history
        if e.stream_seq > stream_seq and isinstance(e.payload, ApiKeyRevoked)
    ]


class ErasureRequests:
    """The handler of the durable `erasures`: carries out each request it reads."""

    def __init__(self, bus: Bus, users: TenantUsers | None = None) -> None:
        self._bus = bus
        self._users = users

    async def handle(self, event: RecordedEvent) -> None:
        match event.payload:
            case EndUserForgetRequested() | AgencyDeletionRequested():
                await carry_out(self._bus, event)
            case TenantDeletionRequested():
                await carry_out_tenant(self._bus, event, self._users)
