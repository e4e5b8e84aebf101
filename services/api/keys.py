"""API keys as the API process sees them: a short-lived cache of good keys, the revocations
heard from the log, and when each key was last used.

A request's key is looked up in the tenants read model once, then served from the cache for
`ttl` seconds. Revocation must not wait for that: every API process subscribes (plain NATS)
to the `tenant.api_key_revoked` events of every tenant and forgets a revoked key the moment
the event is appended, before the projector has applied it. A tenant never issues a key id
twice, so a revoked key stays refused for the life of the process. A key is named by its
tenant and its id together: another tenant holding the same id (it picks ids in its own
commands) revokes only its own.

A key whose creation was answered 202 (accepted, not yet recorded) is remembered for a while
with its command's idempotency key, so that revoking it at once waits for that creation
instead of answering "no such key".

A request made with a key (a stream above all) can `watch` it: the event it gets is set
when the key is revoked, here or by any other process, so an open stream is cut at once
(`services/api/revocation.py`). A process that missed the revocation's message (it was
cut off from NATS then) still cuts them: every `flush_interval` it asks the tenants read
model which of the keys it watches are revoked.

Last-used times are noted in memory and written to `agency_api_key_usage` every few seconds
(and at shutdown), never on the request path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg
import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from agency.contracts.codec import readable_event
from agency.contracts.events import ApiKeyRevoked
from agency.contracts.partitions import live_filters
from agency.infra.jetstream.decoding import event_type_of
from agency.infra.jetstream.live import subscribed

log = structlog.get_logger(__name__)

# Every tenant's tenant events; only key revocations are read (told by their type header).
REVOCATIONS = live_filters("tenant")
_REVOKED = "tenant.api_key_revoked"

_MAX_PENDING = 10_000

Lookup = Callable[[str, str], Awaitable[str | None]]

_USAGE = (
    "INSERT INTO agency_api_key_usage (key_id, tenant_id, last_used_at) "
    "SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) "
    "ON CONFLICT (tenant_id, key_id) DO UPDATE SET last_used_at = "
    "GREATEST(agency_api_key_usage.last_used_at, EXCLUDED.last_used_at)"
)

_REVOKED_OF = (
    "SELECT tenant_id, key_id FROM api_keys "
    "WHERE key_id = ANY($1::text[]) AND revoked_at IS NOT NULL"
)

# A key is named by its tenant and its id: another tenant may hold the same id (it chose
# it in its own command), and nothing it does to that id touches this tenant's key.
KeyRef = tuple[str, str]


@dataclass(slots=True)
class _Cached:
    tenant: str
    key_id: str
    expires: float


@dataclass
class KeyCache:
    """Good keys (by hash) for `ttl` seconds; revoked keys, by tenant and id, for good."""

    ttl: float = 30.0
    flush_interval: float = 5.0
    _good: dict[str, _Cached] = field(default_factory=dict)
    _revoked: set[KeyRef] = field(default_factory=set)
    _used: dict[KeyRef, datetime] = field(default_factory=dict)
    # key id → (tenant, idempotency key) of creations answered before they were recorded.
    _pending: dict[KeyRef, str] = field(default_factory=dict)
    # The open requests of each key, told when it is revoked.
    _watchers: dict[KeyRef, set[asyncio.Future[None]]] = field(default_factory=dict)

    async def tenant_of(self, key_id: str, key_hash: str, lookup: Lookup) -> str | None:
        now = time.monotonic()
        cached = self._good.get(key_hash)
        if cached is not None and cached.expires > now and cached.key_id == key_id:
            tenant: str | None = cached.tenant
        else:
            tenant = await lookup(key_id, key_hash)
            if tenant is not None:
                self._good[key_hash] = _Cached(tenant, key_id, now + self.ttl)
        if tenant is None or (tenant, key_id) in self._revoked:
            return None
        self._used[(tenant, key_id)] = datetime.now(UTC)
        return tenant

    def revoke(self, tenant: str, key_id: str) -> None:
        self._revoked.add((tenant, key_id))
        for revoked in self._watchers.pop((tenant, key_id), ()):
            if not revoked.done():
                revoked.set_result(None)

    @contextlib.contextmanager
    def watch(self, tenant: str, key_id: str) -> Iterator[asyncio.Future[None]]:
        """A future done when the key is revoked (done already if it is)."""
        revoked: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ref = (tenant, key_id)
        if ref in self._revoked:
            revoked.set_result(None)
            yield revoked
            return
        watchers = self._watchers.setdefault(ref, set())
        watchers.add(revoked)
        try:
            yield revoked
        finally:
            watchers.discard(revoked)
            if not watchers and self._watchers.get(ref) is watchers:
                del self._watchers[ref]

    def is_revoked(self, tenant: str, key_id: str) -> bool:
        return (tenant, key_id) in self._revoked

    def note_pending(self, tenant: str, key_id: str, idempotency_key: str) -> None:
        """A creation answered before the registry recorded it (the oldest are forgotten)."""
        if len(self._pending) >= _MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))
        self._pending[(tenant, key_id)] = idempotency_key

    def pending(self, tenant: str, key_id: str) -> str | None:
        """The idempotency key of the tenant's not-yet-recorded creation of `key_id`."""
        return self._pending.get((tenant, key_id))

    async def flush(self, pool: asyncpg.Pool) -> None:
        """Write the last-used times noted since the previous flush."""
        used, self._used = self._used, {}
        if not used:
            return
        refs = list(used)
        ids = [key_id for _, key_id in refs]
        try:
            await pool.execute(
                _USAGE, ids, [tenant for tenant, _ in refs], [used[r] for r in refs], timeout=5
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            log.warning("could not record API key use", keys=len(ids), error=str(e))

    async def recheck(self, pool: asyncpg.Pool) -> None:
        """Revoke the watched keys the read model has revoked (a revocation whose message
        this process missed)."""
        refs = {ref for ref in self._watchers if ref not in self._revoked}
        if not refs:
            return
        try:
            rows = await pool.fetch(_REVOKED_OF, [key_id for _, key_id in refs], timeout=5)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
            log.warning("could not recheck the watched API keys", keys=len(refs), error=str(e))
            return
        for row in rows:
            ref = (row["tenant_id"], row["key_id"])
            if ref in refs:
                self.revoke(*ref)
                log.info("api key revoked (read model)", tenant=ref[0], key_id=ref[1])

    async def _on_revoked(self, msg: Msg) -> None:
        if event_type_of(msg) not in (_REVOKED, None):
            return
        envelope = readable_event(msg.data)
        if envelope is not None and isinstance(envelope.payload, ApiKeyRevoked):
            self.revoke(envelope.tenant_id, envelope.payload.key_id)
            log.info("api key revoked", tenant=envelope.tenant_id, key_id=envelope.payload.key_id)

    @contextlib.asynccontextmanager
    async def watching(self, nc: NATS, pool: asyncpg.Pool) -> AsyncIterator[None]:
        """Follow revocations, flush last-used times and recheck watched keys while the
        app runs."""
        async with subscribed(nc, REVOCATIONS, self._on_revoked):
            flusher = asyncio.create_task(self._flush_every(pool), name="api-key-usage")
            try:
                yield
            finally:
                flusher.cancel()
                await asyncio.gather(flusher, return_exceptions=True)
                await asyncio.shield(self.flush(pool))

    async def _flush_every(self, pool: asyncpg.Pool) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            await self.flush(pool)
            await self.recheck(pool)
