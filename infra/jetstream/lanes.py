"""Lanes: the messages a consumer holds, handled one at a time per aggregate, a bounded
number at once, and never more than a tenant's share.

A worker that fetched messages for the same aggregate would otherwise run their handlers
side by side, each reading, deciding and appending to that aggregate, and all but one
losing the append: a hot aggregate turns a worker's every slot into a conflict loop. Here
each message has a lane (its aggregate, or what its handler writes to); a lane runs one
handler at a time, in the order its messages were fetched, so a hot aggregate occupies one
slot while the other lanes go on. Three bounds, per process:

- `running`: handlers running at once (the worker's concurrency);
- `tenant_running`: handlers of one tenant running at once, so one tenant's many hot lanes
  leave slots to the others;
- `tenant_held`: messages of one tenant held (fetched, not yet settled); a message beyond
  it is refused (the worker dead-letters it with the reason `tenant_backlog`), so one
  tenant's flood cannot fill what the consumer may hold and stall everyone else's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable
from dataclasses import dataclass

from agency.contracts.errors import InvalidToken
from agency.contracts.subjects import tenant_of
from agency.infra.keyed_locks import KeyedLocks

TENANT_BACKLOG = "tenant_backlog"
# A message beyond its tenant's share of what the worker holds (`WorkerTuning.shares`).
TENANT_SHARE = "tenant_share_exceeded"


def subject_tenant(subject: str) -> str:
    """The tenant a message belongs to, by its subject ("" for a subject of no tenant)."""
    try:
        return tenant_of(subject)
    except InvalidToken:
        return ""


@dataclass(frozen=True, slots=True)
class LaneBounds:
    """0 for `tenant_running` or `tenant_held` switches that bound off."""

    running: int
    tenant_running: int = 0
    tenant_held: int = 0

    def __post_init__(self) -> None:
        if self.running < 1:
            raise ValueError(f"running must be at least 1, not {self.running}")
        if self.tenant_running < 0 or self.tenant_held < 0:
            raise ValueError("tenant bounds must be 0 (off) or positive")


class Lanes:
    def __init__(self, bounds: LaneBounds) -> None:
        self.bounds = bounds
        self._running = asyncio.Semaphore(bounds.running)
        self._lanes: KeyedLocks[Hashable] = KeyedLocks()
        self._tenants: dict[str, tuple[asyncio.Semaphore, int]] = {}
        self._held: dict[str, int] = {}

    def held(self, tenant: str) -> int:
        return self._held.get(tenant, 0)

    def hold(self, tenant: str) -> str | None:
        """Count a fetched message of `tenant` as held; why it may not be, or None."""
        limit, now = self.bounds.tenant_held, self._held.get(tenant, 0)
        if limit and now >= limit:
            return (
                f"{TENANT_BACKLOG}: tenant {tenant} already has {now} messages waiting here, "
                f"the bound is {limit}; the excess is dead-lettered (replay it once the "
                "tenant's load has passed)"
            )
        self._held[tenant] = now + 1
        return None

    def release(self, tenant: str) -> None:
        """A held message was settled."""
        now = self._held.get(tenant, 0) - 1
        if now > 0:
            self._held[tenant] = now
        else:
            self._held.pop(tenant, None)

    @contextlib.asynccontextmanager
    async def turn(self, lane: Hashable | None, tenant: str) -> AsyncIterator[None]:
        """Wait for the lane's turn, then the tenant's and the worker's slot. The same
        order everywhere (lane, tenant, worker), so no two turns wait on each other."""
        async with contextlib.AsyncExitStack() as stack:
            if lane is not None:
                # Kept referenced for the turn: the lock lives while someone holds it.
                await stack.enter_async_context(self._lanes.lock(lane))
            if self.bounds.tenant_running:
                await stack.enter_async_context(self._tenant_slot(tenant))
            await stack.enter_async_context(self._running)
            yield

    @contextlib.asynccontextmanager
    async def _tenant_slot(self, tenant: str) -> AsyncIterator[None]:
        slot, users = self._tenants.get(tenant, (None, 0))
        if slot is None:
            slot = asyncio.Semaphore(self.bounds.tenant_running)
        self._tenants[tenant] = (slot, users + 1)
        try:
            async with slot:
                yield
        finally:
            slot, users = self._tenants[tenant]
            if users <= 1:
                del self._tenants[tenant]
            else:
                self._tenants[tenant] = (slot, users - 1)
