"""Outages of the broker or the database: which failures are one, and how work waits one out.

A failure is an outage when it says nothing about the work, only that NATS or PostgreSQL
could not answer it now: a server restarting, a cluster electing a leader, an answer
slower than its timeout, a connection closed or being re-established, a lease lost
because its renewals went unanswered (`is_outage`, the one place that says so; the
driver errors themselves are named in `infra/jetstream/errors.py` and `infra/db.py`).

Work that meets an outage waits it out (`OutageWait.wait_out`): it is tried again in place,
with backoff, until it succeeds, fails for a reason of its own, or the outage has lasted
`max_wait` seconds (`AGENCY_OUTAGE_MAX_WAIT`, default 300). So a restart of the broker
costs no message a delivery and no run an attempt: those count only the work's own
failures. Each wait is logged when it begins (`waiting out an outage`) and when it ends
(`outage over`, or `outage outlasted its wait`), and counted in the process's metrics:
`agency_outage_waiting` (waits under way), `agency_outage_waits_total{what,outcome}` and
`agency_outage_wait_seconds{what}`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agency.infra import db
from agency.infra.jetstream import errors as bus_errors
from agency.infra.jetstream.leases import LeaseLost
from agency.infra.retry import RetryPolicy

log = structlog.get_logger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_MAX_WAIT = 300.0
MAX_WAIT_ENV = "AGENCY_OUTAGE_MAX_WAIT"

# The process's outage waits: `agency serve --metrics-port` and the API's `/metrics` serve
# them (one registry per process, as the waits are).
REGISTRY = CollectorRegistry(auto_describe=True)
WAITING = Gauge(
    "agency_outage_waiting",
    "Work waiting, right now, for the broker or the database to answer again.",
    ["what"],
    registry=REGISTRY,
)
WAITS = Counter(
    "agency_outage_waits",
    "Outages waited out, by what waited and how the wait ended (over, outlasted, stopped).",
    ["what", "outcome"],
    registry=REGISTRY,
)
WAIT_SECONDS = Histogram(
    "agency_outage_wait_seconds",
    "How long work waited for the broker or the database to answer again.",
    ["what"],
    buckets=(0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, float("inf")),
    registry=REGISTRY,
)


def is_outage(error: BaseException) -> bool:
    """Whether `error` is the broker's or the database's, not the work's: the same work
    later may succeed. A group of errors is one when each of its errors is."""
    if isinstance(error, BaseExceptionGroup):
        return all(is_outage(e) for e in error.exceptions)
    return isinstance(error, LeaseLost) or bus_errors.is_transient(error) or db.is_transient(error)


def _describe(error: BaseException) -> str:
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


@dataclass(frozen=True, slots=True)
class OutageWait:
    """Wait an outage out for at most `max_wait` seconds (0: not at all), trying again after
    `wait_initial` seconds, then twice as long each time up to `wait_max`."""

    max_wait: float = DEFAULT_MAX_WAIT
    wait_initial: float = 0.5
    wait_max: float = 5.0

    @classmethod
    def from_env(cls) -> OutageWait:
        raw = os.environ.get(MAX_WAIT_ENV, "").strip()
        if not raw:
            return cls()
        try:
            seconds = float(raw)
        except ValueError:
            seconds = -1.0
        if not seconds >= 0:  # also NaN
            raise ValueError(f"{MAX_WAIT_ENV}={raw!r}: give seconds, such as 300, or 0 for none")
        return cls(max_wait=seconds)

    async def wait_out(
        self, what: str, operation: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`operation(*args, **kwargs)`, tried again while it fails with an outage, for at
        most `max_wait` seconds from the first; then its last error is raised. `what` names
        the waiting work in the log and the metrics (a consumer, say: a bounded set)."""
        try:
            return await operation(*args, **kwargs)
        except Exception as e:
            if self.max_wait <= 0 or not is_outage(e):
                raise
            first = e
        loop = asyncio.get_running_loop()
        started = loop.time()
        log.warning(
            "waiting out an outage", what=what, error=_describe(first), max_wait=self.max_wait
        )
        schedule = RetryPolicy(
            attempts=None,
            timeout=self.max_wait,
            wait_initial=self.wait_initial,
            wait_max=self.wait_max,
            wait_jitter=self.wait_initial,
        )
        pause = min(schedule.delay(1), self.max_wait)
        policy = dataclasses.replace(schedule, timeout=max(self.max_wait - pause, 0.01))
        outcome = "over"
        WAITING.labels(what).inc()
        try:
            await asyncio.sleep(pause)
            return await policy.call(is_outage, operation, *args, **kwargs)
        except asyncio.CancelledError:
            outcome = "stopped"
            raise
        except Exception as e:
            if is_outage(e):
                outcome = "outlasted"
            raise
        finally:
            WAITING.labels(what).dec()
            waited = loop.time() - started
            WAITS.labels(what, outcome).inc()
            WAIT_SECONDS.labels(what).observe(waited)
            if outcome == "over":
                log.info("outage over", what=what, waited=round(waited, 1))
            elif outcome == "outlasted":
                log.error(
                    "outage outlasted its wait", what=what, waited=round(waited, 1),
                    max_wait=self.max_wait,
                )  # fmt: skip
