"""What the API process has found to exist, so that a hot path (a thread's create) does
not read it again.

- Agencies: an agency is never deleted, so one found once (its `agency.created` in the
  log) is kept for the life of the process, the least recently used first to go.
- An agency's own blueprints, by name, as found where the route looks (the blueprints
  read model, or the agency's log): kept for `ttl` seconds, and forgotten the moment a
  `blueprint.deleted` of that name is appended. Every API process subscribes (plain NATS)
  to those events of every tenant, as it does to key revocations (`keys.py`), and hears
  one before the projector applies it; a read model that still lists the deleted name
  would put it back, so a name heard deleted is not kept again for `ttl` seconds (each
  create reads it, and finds it gone once the read model has the deletion). The `ttl`
  bounds what a dropped message could leave behind: nothing the read model's own lag
  would not.

Only what exists is kept: a name not found is read again each time, so a blueprint saved a
moment ago is found as soon as the read model has it.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TypeVar

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from agency.contracts.codec import readable_event
from agency.contracts.events import BlueprintDeleted
from agency.contracts.partitions import live_filters
from agency.infra.jetstream.decoding import event_type_of
from agency.infra.jetstream.live import subscribed

# Every tenant's blueprint deletions, and nothing else.
# Every tenant's agency events; only blueprint deletions are read (told by their header).
BLUEPRINT_DELETIONS = live_filters("agency")
_DELETED = "blueprint.deleted"
AGENCIES_KEPT = 10_000
BLUEPRINTS_KEPT = 10_000
BLUEPRINT_TTL = 30.0

BlueprintRef = tuple[str, str, str]  # tenant, agency id, name
K = TypeVar("K")
V = TypeVar("V")


def _put(kept: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """`key` as the most recently used, the least recently used beyond `limit` dropped."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > limit:
        kept.popitem(last=False)


class KnownResources:
    """Agencies found (kept for good) and agencies' blueprints found (kept for `ttl`, or
    until their deletion is heard); bounded, least recently used first out."""

    def __init__(
        self,
        *,
        agencies: int = AGENCIES_KEPT,
        blueprints: int = BLUEPRINTS_KEPT,
        ttl: float = BLUEPRINT_TTL,
    ) -> None:
        self._agencies: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._blueprints: OrderedDict[BlueprintRef, float] = OrderedDict()
        # When each name was heard deleted: not kept again until `ttl` has passed since.
        self._deleted: OrderedDict[BlueprintRef, float] = OrderedDict()
        self._agencies_kept = agencies
        self._blueprints_kept = blueprints
        self._ttl = ttl

    def has_agency(self, tenant: str, agency_id: str) -> bool:
        key = (tenant, agency_id)
        if key not in self._agencies:
            return False
        self._agencies.move_to_end(key)
        return True

    def found_agency(self, tenant: str, agency_id: str) -> None:
        _put(self._agencies, (tenant, agency_id), None, self._agencies_kept)

    def agency_deleted(self, tenant: str, agency_id: str) -> None:
        self._agencies.pop((tenant, agency_id), None)

    def has_blueprint(self, tenant: str, agency_id: str, name: str) -> bool:
        key = (tenant, agency_id, name)
        expires = self._blueprints.get(key)
        if expires is None:
            return False
        if expires <= time.monotonic():
            del self._blueprints[key]
            return False
        self._blueprints.move_to_end(key)
        return True

    def found_blueprint(self, tenant: str, agency_id: str, name: str) -> None:
        key = (tenant, agency_id, name)
        now = time.monotonic()
        heard = self._deleted.get(key)
        if heard is not None:
            if now - heard < self._ttl:
                return
            del self._deleted[key]
        _put(self._blueprints, key, now + self._ttl, self._blueprints_kept)

    def blueprint_deleted(self, tenant: str, agency_id: str, name: str) -> None:
        key = (tenant, agency_id, name)
        self._blueprints.pop(key, None)
        _put(self._deleted, key, time.monotonic(), self._blueprints_kept)

    async def _on_deleted(self, msg: Msg) -> None:
        if event_type_of(msg) not in (_DELETED, None):
            return
        envelope = readable_event(msg.data)
        if envelope is not None and isinstance(envelope.payload, BlueprintDeleted):
            self.blueprint_deleted(envelope.tenant_id, envelope.aggregate_id, envelope.payload.name)

    @contextlib.asynccontextmanager
    async def watching(self, nc: NATS) -> AsyncIterator[None]:
        """Hear blueprint deletions while the app runs."""
        async with subscribed(nc, BLUEPRINT_DELETIONS, self._on_deleted):
            yield
