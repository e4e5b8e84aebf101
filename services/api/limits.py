"""Per-tenant limits on `invoke` over HTTP: 429 with `Retry-After` (services/tenancy/fairness.py
has the rules; the runtime applies the same active-run limit to commands over NATS), and each
tenant's share of the runs in progress (services/tenancy/admission.py, `RunShares`), counted
from the log while the app runs (`watching`)."""

from __future__ import annotations

import contextlib
import time

import asyncpg
from litestar.exceptions import HTTPException
from nats.aio.client import Client as NATS

from agency.services.tenancy.admission import AdmissionSettings, RunShares
from agency.services.tenancy.fairness import (
    PARKED_RETRY_AFTER,
    FairnessLimits,
    TenantLoad,
    TokenBuckets,
    retry_after_header,
)

# The read model's runs at work and parked on someone (`request.accepted` runs queued
# behind them are not rows yet), and whether the invoked thread's own run is parked.
_RUNS = (
    "SELECT count(*) FILTER (WHERE status = 'running') AS active, "
    "count(*) FILTER (WHERE status = 'paused') AS parked, "
    "count(*) FILTER (WHERE status = 'paused' AND thread_id = $2) AS parked_here "
    "FROM runs WHERE tenant_id = $1 AND status IN ('running', 'paused')"
)


class InvokeLimiter:
    def __init__(
        self, limits: FairnessLimits | None = None, admission: AdmissionSettings | None = None
    ) -> None:
        self.limits = limits or FairnessLimits.from_env()
        self._buckets = TokenBuckets(self.limits)
        self.shares = RunShares(admission or AdmissionSettings.from_env())
        self._load = TenantLoad(shares=self.shares)

    def watching(self, nc: NATS) -> contextlib.AbstractAsyncContextManager[None]:
        """Count each tenant's runs in progress from the live log while the app runs."""
        return self._load.watching(nc)

    async def admit(self, pool: asyncpg.Pool, tenant: str, thread_id: str | None = None) -> None:
        """Return if the tenant may invoke now (on `thread_id`; None for a new thread); else
        raise 429 saying when to retry. An invoke to a thread whose run is parked goes to
        that run (it parks nothing more), so the parked limit does not refuse it, as the
        runtime's does not."""
        wait = self._buckets.take(tenant, time.monotonic())
        if wait is not None:
            raise HTTPException(
                status_code=429,
                detail=f"too many invokes: the limit is {self.limits.invokes_per_second:g} "
                f"per second per tenant; retry in {wait:.2f} s",
                headers={"Retry-After": retry_after_header(wait)},
            )
        refused = self.shares.refusal(tenant, time.monotonic())
        if refused is not None:
            raise HTTPException(
                status_code=429,
                detail=str(refused),
                headers={"Retry-After": str(refused.retry_after)},
            )
        limits = self.limits
        if not limits.max_active_runs and not limits.max_parked_runs:
            return
        try:
            async with pool.acquire() as conn:
                row = await conn.fetchrow(_RUNS, tenant, thread_id)
        except asyncpg.UndefinedTableError:
            return  # no runs read model yet: the runtime's own limit still holds
        active, parked = int(row["active"]), int(row["parked"])
        if limits.max_active_runs and active >= limits.max_active_runs:
            raise HTTPException(
                status_code=429,
                detail=f"the tenant has {active} active runs, the limit is "
                f"{limits.max_active_runs}; invoke again when one has ended",
                headers={"Retry-After": "1"},
            )
        joins_parked = int(row["parked_here"]) > 0
        if limits.max_parked_runs and parked >= limits.max_parked_runs and not joins_parked:
            raise HTTPException(
                status_code=429,
                detail=f"the tenant has {parked} runs waiting on an answer (an approval), the "
                f"limit is {limits.max_parked_runs}; answer or cancel one first, or retry in "
                f"{PARKED_RETRY_AFTER} s",
                headers={"Retry-After": str(PARKED_RETRY_AFTER)},
            )
