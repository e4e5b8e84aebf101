"""Admission under overload: each tenant gets its share of what the process can do now.

Three counts per process, each of what every tenant has in it:

- work (`enter` … `Ticket.done`): requests that change something (HTTP writes, LangGraph
  runs, NATS commands through the gateway), from the moment they come in until they are
  answered. How many may be in flight at once (`limit`) is measured, not configured: each
  answered request's latency is a sample, and the limit follows the ratio of the usual
  latency (learnt while the process is quiet) to the recent one (a gradient, as TCP Vegas
  does), between `min_limit` and `max_limit`. When the process answers as fast as it
  usually does the limit grows; when answers slow down (appends queue in the broker, the
  event loop lags, the runtime takes invokes up late), it shrinks.
- open (`open` … `Ticket.done`): reads and streams (SSE, WebSocket), bounded by
  `max_open` at once.
- runs (`RunShares`): runs in progress (accepted, not ended), counted from the log by every
  API and runtime process, bounded by a limit measured the same way from how long runs take
  (`runs_min_limit` to `runs_max_limit`). A tenant at its share may not start another run:
  its invoke is refused at the API (429) and at the runtime (`request.rejected`), whichever
  way it came.

None of them refuses anyone while it has room. Once one is full (saturated), each tenant
with something in it gets a share of it in proportion to its weight (`weights`, 1 unless
set); a tenant holding its share or more is refused with the seconds after which its own
work beyond the share will likely be done, and a tenant under its share is admitted
whatever the others hold. So a flooding tenant meets a refusal as soon as the process is saturated,
before its request is read or queued, and the others go on as if it were not there.

The decisions are pure arithmetic on counts and a clock given by the caller.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from agency.services.tenancy.measured_limit import RECENT, MeasuredLimit
from agency.services.tenancy.settings_env import from_environ

ADMISSION_LIMIT = "tenant_share_exceeded"
# Seconds after a refusal during which the system is not taken as quiet.
_QUIET_AFTER = 5.0
# A request's body takes one more place per this many bytes, up to `MOST_PLACES` in all.
BODY_UNIT = 65_536
MOST_PLACES = 16
_WORK = "places taken by requests in progress (one each, one more per 64 KB of body)"


class AdmissionSettings(msgspec.Struct, frozen=True, kw_only=True):
    """The operator's settings (`AGENCY_ADMISSION_<FIELD>`); `enabled=False` admits all."""

    enabled: bool = True
    # Requests in flight at once (per process): where the measured limit starts, its bounds.
    initial_limit: int = 16
    min_limit: int = 8
    max_limit: int = 128
    # Latency this many times the usual one is taken as the process being overloaded.
    latency_tolerance: float = 2.0
    # Reads and streams open at once (per process).
    max_open: int = 512
    # Runs in progress at once, over all tenants: the measured limit's start and bounds.
    runs_initial_limit: int = 32
    runs_min_limit: int = 8
    runs_max_limit: int = 256
    # Tenants' commands stored and not yet taken up by the services, at once (the gateway).
    commands_waiting: int = 64
    # Tenants' weights, `TENANT=WEIGHT` comma-separated (`t_01J8…=2,t_01J9…=0.5`).
    weights: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.min_limit <= self.initial_limit <= self.max_limit:
            raise ValueError(
                "AGENCY_ADMISSION_MIN_LIMIT <= AGENCY_ADMISSION_INITIAL_LIMIT <= "
                f"AGENCY_ADMISSION_MAX_LIMIT must hold, at least 1: they are {self.min_limit}, "
                f"{self.initial_limit}, {self.max_limit}"
            )
        if not 1 <= self.runs_min_limit <= self.runs_initial_limit <= self.runs_max_limit:
            raise ValueError(
                "AGENCY_ADMISSION_RUNS_MIN_LIMIT <= AGENCY_ADMISSION_RUNS_INITIAL_LIMIT <= "
                "AGENCY_ADMISSION_RUNS_MAX_LIMIT must hold, at least 1: they are "
                f"{self.runs_min_limit}, {self.runs_initial_limit}, {self.runs_max_limit}"
            )
        if self.latency_tolerance < 1.0:
            raise ValueError(
                f"AGENCY_ADMISSION_LATENCY_TOLERANCE is {self.latency_tolerance}: it must be "
                "at least 1"
            )
        if self.commands_waiting < 1:
            raise ValueError(
                f"AGENCY_ADMISSION_COMMANDS_WAITING is {self.commands_waiting}: it must be >= 1"
            )
        if self.max_open < 1:
            raise ValueError(f"AGENCY_ADMISSION_MAX_OPEN is {self.max_open}: it must be >= 1")
        parse_weights(self.weights)

    @classmethod
    def from_env(cls) -> AdmissionSettings:
        """`AGENCY_ADMISSION_ENABLED`, `…_INITIAL_LIMIT`, `…_MIN_LIMIT`, `…_MAX_LIMIT`,
        `…_LATENCY_TOLERANCE`, `…_MAX_OPEN`, `…_RUNS_INITIAL_LIMIT`, `…_RUNS_MIN_LIMIT`,
        `…_RUNS_MAX_LIMIT`, `…_COMMANDS_WAITING`, `…_WEIGHTS`."""
        return from_environ(cls, "AGENCY_ADMISSION_")


def parse_weights(text: str) -> dict[str, float]:
    """`TENANT=WEIGHT,…` as a map; an item that is not one names itself in the error."""
    weights: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        tenant, sep, value = item.partition("=")
        try:
            weight = float(value) if sep and tenant.strip() else math.nan
        except ValueError:
            weight = math.nan
        if not weight > 0 or math.isinf(weight):
            raise ValueError(
                f"AGENCY_ADMISSION_WEIGHTS item {item!r} is not TENANT=WEIGHT with a "
                "positive weight"
            )
        weights[tenant.strip()] = weight
    return weights


def cost_of(body_bytes: int) -> int:
    """Places a request takes: one, and one more per `BODY_UNIT` bytes of its body, at most
    `MOST_PLACES` (a 200 KB invoke takes four)."""
    return min(MOST_PLACES, 1 + max(0, body_bytes) // BODY_UNIT)


class Refused(Exception):
    """A tenant at or over its share of a saturated process; retry after `retry_after` s."""

    def __init__(self, tenant: str, held: int, share: float, what: str, retry_after: int) -> None:
        self.tenant, self.held, self.share, self.retry_after = tenant, held, share, retry_after
        super().__init__(
            f"{ADMISSION_LIMIT}: the server is at capacity and the tenant has {held} {what}, "
            f"its share is {max(1, math.floor(share))}; retry in {retry_after} s"
        )


@dataclass
class Ticket:
    """One admitted request; `done` (once) gives its place back."""

    pool: _Pool
    tenant: str
    started: float
    # Places it takes: one, and one more per `BODY_UNIT` bytes of its body.
    cost: int = 1
    # Entered while the process had under half its limit in flight.
    quiet: bool = False
    sample: bool = True
    _done: bool = False

    def done(self, now: float, *, sample: bool | None = None) -> None:
        if self._done:
            return
        self._done = True
        self.pool.leave(self, now, self.sample if sample is None else sample)


def share_of(capacity: float, weights: dict[str, float], held: Counter[str], tenant: str) -> float:
    """The tenant's part of the capacity, among the tenants holding some of it."""
    mine = weights.get(tenant, 1.0)
    others = sum(weights.get(t, 1.0) for t in held if t != tenant)
    return capacity * mine / (mine + others)


@dataclass
class _Pool(ABC):
    """A count of what tenants hold, shared by weight once full; `capacity` is each
    kind's (measured for work, fixed for what is open)."""

    weights: dict[str, float]
    what: str
    held: Counter[str] = field(default_factory=Counter)
    total: int = 0
    last_refused: float = -math.inf

    @abstractmethod
    def capacity(self) -> float: ...

    def share(self, tenant: str) -> float:
        return share_of(self.capacity(), self.weights, self.held, tenant)

    def enter(self, tenant: str, now: float, cost: int = 1) -> Ticket:
        """Admit or raise `Refused`: refused only at or over its share of a full pool."""
        if self.total >= self.capacity():
            share = self.share(tenant)
            if self.held[tenant] >= max(1, math.floor(share)):
                self.last_refused = now
                raise Refused(
                    tenant, self.held[tenant], share, self.what, self.retry_after(tenant, share)
                )
        return self.admit(tenant, now, cost)

    def admit(self, tenant: str, now: float, cost: int = 1) -> Ticket:
        """Count without asking: for what was admitted elsewhere and is never refused."""
        quiet = self.total < self.capacity() / 2 and now - self.last_refused > _QUIET_AFTER
        self.held[tenant] += cost
        self.total += cost
        return Ticket(self, tenant, now, cost, quiet)

    def leave(self, ticket: Ticket, now: float, sample: bool) -> None:
        self.total -= ticket.cost
        self.held[ticket.tenant] -= ticket.cost
        if self.held[ticket.tenant] <= 0:
            del self.held[ticket.tenant]

    def retry_after(self, tenant: str, share: float) -> int:
        return 1


@dataclass
class WorkPool(_Pool):
    """Requests in flight, bounded by a limit measured from their latency."""

    settings: AdmissionSettings = field(default_factory=AdmissionSettings)
    measured: MeasuredLimit = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.measured = MeasuredLimit(
            s.min_limit, s.max_limit, s.latency_tolerance, float(s.initial_limit)
        )

    @property
    def limit(self) -> float:
        return self.measured.limit

    def capacity(self) -> float:
        return math.floor(self.measured.limit)

    def leave(self, ticket: Ticket, now: float, sample: bool) -> None:
        super().leave(ticket, now, sample)
        if sample:
            took = max(now - ticket.started, 1e-4)
            self.measured.observe(took, quiet=ticket.quiet, in_use=self.total)

    def retry_after(self, tenant: str, share: float) -> int:
        return self.measured.retry_after(self.held[tenant], share)


@dataclass
class OpenPool(_Pool):
    """Reads and streams open at once, at most `max_open`; how long one stays open (the
    recent average) says when a refused tenant may try again."""

    max_open: int = 512
    recent: float = 0.0

    def capacity(self) -> float:
        return float(self.max_open)

    def leave(self, ticket: Ticket, now: float, sample: bool) -> None:
        super().leave(ticket, now, sample)
        held = max(now - ticket.started, 1e-4)
        self.recent = held if not self.recent else self.recent + RECENT * (held - self.recent)

    def retry_after(self, tenant: str, share: float) -> int:
        whole = max(1, math.floor(share))
        rounds = math.ceil((self.held[tenant] - whole + 1) / whole)
        return max(1, math.ceil(rounds * (self.recent or 1.0)))


@dataclass
class RunShares:
    """Runs in progress per tenant (accepted and not yet ended, as the log tells them),
    against a limit on all of them measured from how long runs take: once as many runs as
    the limit are in progress, a tenant at its share may start no other until one ends
    (`refusal`). What it says comes from the tenant's own runs, so every process that follows
    the log agrees."""

    settings: AdmissionSettings = field(default_factory=AdmissionSettings)
    held: Counter[str] = field(default_factory=Counter)
    last_refused: float = -math.inf
    # run id -> when it was accepted; the tenant is the caller's to give at its end.
    _runs: dict[str, float] = field(default_factory=dict)
    # The runs accepted while the system was quiet, still in progress: fewer than half the
    # limit each time one is added, so a small set.
    _quiet: set[str] = field(default_factory=set)
    weights: dict[str, float] = field(init=False)
    measured: MeasuredLimit = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.weights = parse_weights(s.weights)
        self.measured = MeasuredLimit(
            s.runs_min_limit, s.runs_max_limit, s.latency_tolerance, float(s.runs_initial_limit)
        )

    @property
    def in_progress(self) -> int:
        return len(self._runs)

    def accepted(self, tenant: str, run_id: str, now: float) -> None:
        if run_id in self._runs:
            return
        limit = math.floor(self.measured.limit)
        if len(self._runs) < limit / 2 and now - self.last_refused > _QUIET_AFTER:
            self._quiet.add(run_id)
        self._runs[run_id] = now
        self.held[tenant] += 1

    def ended(self, tenant: str, run_id: str, now: float) -> None:
        """The tenant's run ended (or parked); one never accepted, or ended already, is
        nothing."""
        accepted = self._runs.pop(run_id, None)
        if accepted is None:
            return
        quiet = run_id in self._quiet
        self._quiet.discard(run_id)
        self.held[tenant] -= 1
        if self.held[tenant] <= 0:
            del self.held[tenant]
        took = max(now - accepted, 1e-4)
        self.measured.observe(took, quiet=quiet, in_use=len(self._runs))

    def refusal(self, tenant: str, now: float) -> Refused | None:
        """Why the tenant may not start another run now, or None."""
        if not self.settings.enabled:
            return None
        limit = math.floor(self.measured.limit)
        if len(self._runs) < limit:
            return None
        share = share_of(limit, self.weights, self.held, tenant)
        held = self.held[tenant]
        if held < max(1, math.floor(share)):
            return None
        self.last_refused = now
        retry_after = self.measured.retry_after(held, share)
        return Refused(tenant, held, share, "runs in progress", retry_after)


class Admission:
    """Both pools of one process; `enter` for work, `open` for reads and streams."""

    def __init__(self, settings: AdmissionSettings | None = None) -> None:
        self.settings = settings or AdmissionSettings.from_env()
        weights = parse_weights(self.settings.weights)
        self.work = WorkPool(weights, _WORK, settings=self.settings)
        self.reads = OpenPool(weights, "reads and streams open", max_open=self.settings.max_open)

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    @property
    def last_refused(self) -> float:
        """When either pool last refused a request (the clock given to `enter`/`open`)."""
        return max(self.work.last_refused, self.reads.last_refused)

    def enter(self, tenant: str, now: float, body_bytes: int = 0) -> Ticket:
        """A request that changes something; a large body takes more places (`cost_of`)."""
        return self.work.enter(tenant, now, cost_of(body_bytes))

    def open(self, tenant: str, now: float) -> Ticket:
        return self.reads.enter(tenant, now)
