"""Per-tenant fairness: how many runs a tenant may have at once, how fast it may invoke,
how many schedules it may have and how often they may fire (`ScheduleLimits`).

One tenant's flood must not starve another's runs. Two limits, per tenant:

- active runs (`max_active_runs`): an invoke beyond it is refused, over NATS as
  `request.rejected` with the reason (the runtime decides, `commands.invoke`), over HTTP
  as 429 with `Retry-After`. Runs inside an admitted tree (a subagent's run, a child's
  report to its parent) count but are never refused: the tree's root holds the slot. A
  refused invoke costs one small event, never a run, so a flood drains in moments and the
  runtime's capacity stays free for everyone else. A run parked on someone (an approval,
  a run out of steps: `run.paused`) is not active: it takes none of the runtime's
  capacity, and a tenant whose users are slow to answer is not stopped by it. Parked runs
  have a limit of their own (`max_parked_runs`, far higher: what they hold is memory and
  storage), refused the same way; a resumed run is active again and is never refused.
- invokes per second (`invokes_per_second`, `invoke_burst`): a token bucket per tenant
  in each API process; beyond it, 429 with the seconds until a token is free.

The decisions are pure; `TenantLoad` keeps the count they need from the log: every
runtime process follows every tenant's `request.accepted` and run terminals (plain NATS),
so all of them agree on each tenant's admitted runs within milliseconds, whichever
process drives which run. A process never admits beyond the limit: an accepted request
is reserved in the same step that decided it (no await between), before its append, and
released if the append fails, so concurrent invokes cannot all see the last free slot (a
reservation whose append lost a race holds its slot for that moment, so a burst may be
admitted a little under the limit). Across processes two may still take one slot at
once, and a process started while runs are active undercounts them until they end: the
limit is a fairness bound, not an accounting one.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import msgspec
from nats.aio.client import Client as NATS

from agency.contracts.codec import readable_event
from agency.contracts.events import (
    RequestAccepted,
    RequestInjected,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    RunResumed,
)
from agency.domain.cron import cron_problem, interval_problem
from agency.infra.jetstream.live import thread_events_live
from agency.services.tenancy.admission import RunShares
from agency.services.tenancy.settings_env import from_environ

ACTIVE_RUN_LIMIT = "tenant_active_run_limit"
PARKED_RUN_LIMIT = "tenant_parked_run_limit"
# A tenant at its parked-run limit is told to try again after this many seconds (its runs
# wait on people: no time can be known).
PARKED_RETRY_AFTER = 30
_WATCHED = (
    "request.accepted",
    "request.injected",
    "run.paused",
    "run.resumed",
    "run.completed",
    "run.error",
    "run.canceled",
)


class FairnessLimits(msgspec.Struct, frozen=True, kw_only=True):
    """0 switches a limit off."""

    max_active_runs: int = 100
    max_parked_runs: int = 10_000
    invokes_per_second: float = 50.0
    invoke_burst: int = 100

    @classmethod
    def from_env(cls) -> FairnessLimits:
        """`AGENCY_TENANT_MAX_ACTIVE_RUNS`, `AGENCY_TENANT_MAX_PARKED_RUNS`,
        `AGENCY_TENANT_INVOKES_PER_SECOND`, `AGENCY_TENANT_INVOKE_BURST`."""
        return from_environ(cls, "AGENCY_TENANT_")


def refuse_invoke(active_runs: int, limits: FairnessLimits, parked_runs: int = 0) -> str | None:
    """Why a tenant with `active_runs` admitted runs at work and `parked_runs` waiting on
    someone may not start another, or None."""
    return _at_limit(
        ACTIVE_RUN_LIMIT, active_runs, "active runs", limits.max_active_runs,
        "invoke again when one has ended",
    ) or _at_limit(
        PARKED_RUN_LIMIT, parked_runs, "runs waiting on an answer (an approval)",
        limits.max_parked_runs,
        f"answer or cancel one first, or retry in {PARKED_RETRY_AFTER} s",
    )  # fmt: skip


def _at_limit(reason: str, count: int, what: str, limit: int, then: str) -> str | None:
    """The refusal of one more of `what` where the tenant has `count` and `limit` (0: no
    limit) is allowed, or None."""
    if limit and count >= limit:
        return f"{reason}: the tenant has {count} {what}, the limit is {limit}; {then}"
    return None


@dataclass
class TokenBuckets:
    """Invokes per second per tenant; `take` answers None (go) or the seconds to wait."""

    limits: FairnessLimits
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def take(self, tenant: str, now: float) -> float | None:
        rate, burst = self.limits.invokes_per_second, max(self.limits.invoke_burst, 1)
        if rate <= 0:
            return None
        tokens, last = self._buckets.get(tenant, (float(burst), now))
        tokens = min(float(burst), tokens + (now - last) * rate)
        if tokens >= 1.0:
            self._buckets[tenant] = (tokens - 1.0, now)
            return None
        self._buckets[tenant] = (tokens, now)
        return (1.0 - tokens) / rate


def retry_after_header(seconds: float) -> str:
    """`Retry-After` in whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


@dataclass
class TenantLoad:
    """Admitted, not yet ended runs per tenant, as the log tells them: at work (`active`)
    and parked on someone (`parked`).

    Each run is kept once, as its id and its tenant (one string per tenant, shared by its
    runs): a run seen twice (from the step that decided it and again from the log, or in a
    replay) counts once, and the end of a run never seen (accepted before this process
    started) counts nothing; nor does its pause or resume."""

    # run id -> tenant: stored (admitted) and at work, stored and parked on someone, and
    # accepted by this process but not yet stored (or not yet seen back from the log). A
    # run is in one of them at a time: a pause moves it, so it costs one entry all along.
    _runs: dict[str, str] = field(default_factory=dict)
    _parked: dict[str, str] = field(default_factory=dict)
    _reserved: dict[str, str] = field(default_factory=dict)
    # Per tenant: its runs in any of them, and its parked ones.
    _admitted: Counter[str] = field(default_factory=Counter)
    _parked_count: Counter[str] = field(default_factory=Counter)
    # Each tenant's share of the runs in progress (`services/tenancy/admission.py`).
    shares: RunShares | None = None

    def active(self, tenant: str) -> int:
        """The tenant's admitted runs not parked on someone."""
        return self._admitted[tenant] - self._parked_count[tenant]

    def parked(self, tenant: str) -> int:
        """The tenant's admitted runs parked on someone."""
        return self._parked_count[tenant]

    def reserve(self, tenant: str, run_id: str) -> None:
        """Count a run this process has just decided to accept, before it is stored."""
        if not self._known(run_id) and run_id not in self._reserved:
            self._reserved[run_id] = self._count(tenant)

    def release(self, tenant: str, run_id: str) -> None:
        """A reservation whose append did not happen (or is now counted as admitted)."""
        reserved = self._reserved.pop(run_id, None)
        if reserved is not None:
            self._uncount(reserved)

    def admitted(self, tenant: str, run_id: str) -> None:
        if not self._known(run_id):
            reserved = self._reserved.pop(run_id, None)
            self._runs[run_id] = self._count(tenant) if reserved is None else reserved
        if self.shares is not None:
            self.shares.accepted(tenant, run_id, time.monotonic())

    def ended(self, tenant: str, run_id: str) -> None:
        admitted = self._runs.pop(run_id, None)
        if admitted is None:
            admitted = self._parked.pop(run_id, None)
            if admitted is not None:
                self._unpark(admitted)
        if admitted is not None:
            self._uncount(admitted)
        self.release(tenant, run_id)
        if self.shares is not None:
            self.shares.ended(tenant, run_id, time.monotonic())

    def paused(self, tenant: str, run_id: str) -> None:
        """A run waiting on someone (an approval) takes none of the process's capacity: it
        leaves the runs in progress (`RunShares`) and the active runs until it resumes,
        and counts as parked."""
        owner = self._runs.pop(run_id, None)
        if owner is not None:
            self._parked[run_id] = owner
            self._parked_count[owner] += 1
        if self.shares is not None:
            self.shares.ended(tenant, run_id, time.monotonic())

    def resumed(self, tenant: str, run_id: str) -> None:
        owner = self._parked.pop(run_id, None)
        if owner is not None:
            self._unpark(owner)
            self._runs[run_id] = owner
        if self.shares is not None and run_id in self._runs:
            self.shares.accepted(tenant, run_id, time.monotonic())

    def _known(self, run_id: str) -> bool:
        return run_id in self._runs or run_id in self._parked

    def _unpark(self, owner: str) -> None:
        self._parked_count[owner] -= 1
        if self._parked_count[owner] <= 0:
            del self._parked_count[owner]

    def _count(self, tenant: str) -> str:
        self._admitted[tenant] += 1
        return sys.intern(tenant)

    def _uncount(self, tenant: str) -> None:
        self._admitted[tenant] -= 1
        if self._admitted[tenant] <= 0:
            del self._admitted[tenant]

    def over_share(self, tenant: str) -> str | None:
        """Why the tenant may not start another run: at its share of the runs in progress."""
        if self.shares is None:
            return None
        refused = self.shares.refusal(tenant, time.monotonic())
        return None if refused is None else str(refused)

    def observe(self, data: bytes) -> None:
        env = readable_event(data)
        if env is None:
            return
        match env.payload:
            case RequestAccepted(run_id=run_id):
                self.admitted(env.tenant_id, run_id)
            case RunPaused(run_id=run_id):
                self.paused(env.tenant_id, run_id)
            case RunResumed(run_id=run_id):
                self.resumed(env.tenant_id, run_id)
            case RunCompleted(run_id=run_id) | RunError(run_id=run_id) | RunCanceled(run_id=run_id):
                self.ended(env.tenant_id, run_id)
            case RequestInjected(request_run_id=run_id):
                # The request joined the active run: its own run id ends here.
                self.ended(env.tenant_id, run_id)

    def watching(self, nc: NATS) -> contextlib.AbstractAsyncContextManager[None]:
        """Observe the live thread events while the app runs."""
        return thread_events_live(nc, _WATCHED, self.observe)


SCHEDULE_LIMIT = "tenant_schedule_limit"
SCHEDULE_RATE = "tenant_schedule_rate"


class ScheduleLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Per tenant: how often one schedule may fire (`min_interval`, seconds), how many
    active schedules it may have (`max_per_tenant`), how many fires per minute all of them
    may make (`fires_per_minute`, with a burst of `fire_burst`); 0 switches a limit off."""

    min_interval: float = 10.0
    max_per_tenant: int = 20
    fires_per_minute: float = 30.0
    fire_burst: int = 10

    @classmethod
    def from_env(cls) -> ScheduleLimits:
        d = cls()
        env = os.environ.get
        return cls(
            min_interval=float(env("AGENCY_SCHEDULE_MIN_INTERVAL", d.min_interval)),
            max_per_tenant=int(env("AGENCY_TENANT_MAX_SCHEDULES", d.max_per_tenant)),
            fires_per_minute=float(
                env("AGENCY_TENANT_SCHEDULE_FIRES_PER_MINUTE", d.fires_per_minute)
            ),
            fire_burst=int(env("AGENCY_TENANT_SCHEDULE_FIRE_BURST", d.fire_burst)),
        )

    def fire_buckets(self) -> TokenBuckets:
        """Fires per tenant as a token bucket (the invoke bucket's arithmetic)."""
        return TokenBuckets(
            FairnessLimits(
                invokes_per_second=self.fires_per_minute / 60.0, invoke_burst=self.fire_burst
            )
        )


def refuse_schedule(active_schedules: int, limits: ScheduleLimits) -> str | None:
    """Why a tenant with `active_schedules` may not add another, or None."""
    return _at_limit(
        SCHEDULE_LIMIT, active_schedules, "active schedules", limits.max_per_tenant,
        "remove one first",
    )  # fmt: skip


def schedule_problem(cron: str, limits: ScheduleLimits) -> str | None:
    """Why `cron` may not be a schedule's: not an accepted expression, or firing more often
    than `limits.min_interval` allows; None if it may."""
    return cron_problem(cron) or frequency_problem(cron, limits)


def frequency_problem(cron: str, limits: ScheduleLimits) -> str | None:
    """Why `cron` (an accepted expression) fires more often than `limits.min_interval`
    allows, or None."""
    return interval_problem(cron, limits.min_interval) if limits.min_interval else None
