"""Per-tenant limits on `invoke` over HTTP: 429 with `Retry-After` (services/tenancy/fairness.py
has the rules; the runtime applies the same active-run limit to commands over NATS)."""

from __future__ import annotations

import time

import asyncpg
from litestar.exceptions import HTTPException

from agency.services.tenancy.fairness import FairnessLimits, TokenBuckets, retry_after_header

# The read model's active runs; `request.accepted` runs queued behind them are not rows yet.
_ACTIVE_RUNS = "SELECT count(*) FROM runs WHERE tenant_id = $1 AND status IN ('running', 'paused')"


class InvokeLimiter:
    def __init__(self, limits: FairnessLimits | None = None) -> None:
        self.limits = limits or FairnessLimits.from_env()
        self._buckets = TokenBuckets(self.limits)

    async def admit(self, pool: asyncpg.Pool, tenant: str) -> None:
        """Return if the tenant may invoke now; else raise 429 saying when to retry."""
        wait = self._buckets.take(tenant, time.monotonic())
        if wait is not None:
            raise HTTPException(
                status_code=429,
                detail=f"too many invokes: the limit is {self.limits.invokes_per_second:g} "
                f"per second per tenant; retry in {wait:.2f} s",
                headers={"Retry-After": retry_after_header(wait)},
            )
        limit = self.limits.max_active_runs
        if not limit:
            return
        try:
            async with pool.acquire() as conn:
                active = int(await conn.fetchval(_ACTIVE_RUNS, tenant))
        except asyncpg.UndefinedTableError:
            return  # no runs read model yet: the runtime's own limit still holds
        if active >= limit:
            raise HTTPException(
                status_code=429,
                detail=f"the tenant has {active} active runs, the limit is {limit}; "
                "invoke again when one has ended",
                headers={"Retry-After": "1"},
            )
