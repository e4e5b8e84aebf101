"""What each tenant, and each of its agencies, spent this period, and the budgets set for
them, read from the log (`services/tenancy/spend.py` has the rules).

Spend is the `model.completed` events of the tenant's threads since the period began
(their usage and recorded cost): the first look at a tenant reads its threads' events
from the period's start (direct gets by start time on the tenant's thread subjects, the
type told by each message's header), later looks only what was appended since. Every
process reading the log agrees, and a restarted one counts what was spent before it
started. The budgets are the tenant's `tenant.budget_set` and the agency's
`agency.budget_set`, refreshed at most every `refresh` seconds. A check finds the budgets
in force first and reads the spend only if one is: a tenant with none pays no read. The
runtime's check before each model call reads the spend to the log's end; the HTTP door's
check of an invoke takes it as read within `REFRESH_SECONDS` (a read of the tenant's
events on every invoke would cost more than the run's own appends; a run admitted in
that second is still refused at its model call).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agency.contracts.events import AgencyBudgetSet, ModelCompleted, TenantBudgetSet
from agency.contracts.records import Position, RecordedEvent
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.aggregate_reads import direct_batch
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.decoding import event_type_of, record_from_direct_get
from agency.services.tenancy.spend import (
    Budget,
    Overrides,
    SpendSettings,
    Spent,
    budgets,
    period_start,
    refusal,
)

_PAGE = 1000
_USAGE = "model.completed"
# Seconds the budgets read for a tenant or an agency are used before the log is asked again.
REFRESH_SECONDS = 1.0


@dataclass(slots=True)
class _Usage:
    since: datetime
    # Where the reading stopped, per partition of the log.
    stream_seqs: dict[int, int] = field(default_factory=dict)
    # When the log was last read to its end (monotonic seconds).
    read_at: float = -1e9
    total: Spent = field(default_factory=Spent)
    agencies: dict[str, Spent] = field(default_factory=dict)


@dataclass(slots=True)
class _Set:
    tokens: int | None = None
    usd: float | None = None
    position: Position = field(default_factory=Position)
    checked: float = -1e9


@dataclass(frozen=True, slots=True)
class Standing:
    """A tenant's (and one agency's) budgets in force and what they spent this period."""

    tenant: Budget
    agency: Budget
    tenant_spent: Spent
    agency_spent: Spent


class SpendLedger:
    """Spend and budgets read over `bus`, on first use (a ledger is made with its process's
    dependencies, before their connection is used)."""

    def __init__(
        self,
        bus: Bus,
        settings: SpendSettings | None = None,
        *,
        timeout: float = 5.0,
        refresh: float = REFRESH_SECONDS,
        stream: str = EVENTS_STREAM,
    ) -> None:
        self.settings = settings or SpendSettings.from_env()
        self._bus = bus
        self._timeout = timeout
        self._refresh = refresh
        self._stream = stream
        self._usage: dict[str, _Usage] = {}
        self._sets: dict[tuple[str, str], _Set] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def standing(
        self,
        tenant: str,
        agency: str,
        now: datetime | None = None,
        *,
        counted: bool = True,
        fresh_within: float = 0.0,
    ) -> Standing:
        """The budgets in force and what was spent against them, the spend read to the
        log's end, or as read at most `fresh_within` seconds ago. Without `counted`, the
        spend is read only where a budget is in force (Spent() where none is)."""
        now = now or datetime.now(UTC)
        asked = time.monotonic() - fresh_within
        async with self._locks.setdefault(tenant, asyncio.Lock()):
            tenant_set = await self._set_of(tenant, "tenant", tenant)
            agency_set = await self._set_of(tenant, "agency", agency) if agency else _Set()
            overrides = Overrides(
                tenant_tokens=tenant_set.tokens,
                tenant_usd=tenant_set.usd,
                agency_tokens=agency_set.tokens,
                agency_usd=agency_set.usd,
            )
            tenant_budget, agency_budget = budgets(self.settings, overrides)
            usage = (
                await self._usage_of(tenant, now, asked)
                if counted or _in_force(tenant_budget) or _in_force(agency_budget)
                else None
            )
        return Standing(
            tenant=tenant_budget,
            agency=agency_budget,
            tenant_spent=usage.total if usage is not None else Spent(),
            agency_spent=usage.agencies.get(agency, Spent()) if usage is not None else Spent(),
        )

    async def refusal(
        self,
        tenant: str,
        agency: str,
        estimate: Spent,
        now: datetime | None = None,
        *,
        fresh_within: float = 0.0,
    ) -> str | None:
        """Why a call of the tenant's `agency` estimated at `estimate` may not be made
        (the tenant's budget first, then the agency's), or None; the spend as read at most
        `fresh_within` seconds ago."""
        now = now or datetime.now(UTC)
        # With no budget in force nothing is refused, and the log's spend is not read: a
        # tenant without budgets pays no read of its events for each invoke and model call.
        standing = await self.standing(
            tenant, agency, now, counted=False, fresh_within=fresh_within
        )
        period = self.settings.period
        return refusal(
            "tenant", tenant, standing.tenant, standing.tenant_spent, estimate, period, now
        ) or (
            refusal("agency", agency, standing.agency, standing.agency_spent, estimate, period, now)
            if agency
            else None
        )

    def forget(self, tenant: str) -> None:
        """Read the tenant's budgets (and its agencies') from the log at the next look."""
        for (_, key), kept in self._sets.items():
            if key.startswith(f"{tenant}."):
                kept.checked = -1e9

    async def _usage_of(self, tenant: str, now: datetime, asked: float) -> _Usage:
        """The tenant's usage, read from the log to its end since `asked` (one read serves
        every look that waited for it)."""
        since = period_start(self.settings.period, now)
        usage = self._usage.get(tenant)
        if usage is None or usage.since != since:
            # A new period: counted afresh from its start.
            usage = self._usage[tenant] = _Usage(since=since)
        elif usage.read_at >= asked:
            return usage
        started = time.monotonic()
        layout = self._bus.layout
        for partition in range(layout.partitions):
            stream = self._stream if not layout.partitioned else layout.stream(partition)
            subject = layout.aggregate_filter("thread", tenant, partition)
            await self._read_usage(usage, partition, stream, subject, since)
        usage.read_at = started
        return usage

    async def _read_usage(
        self, usage: _Usage, partition: int, stream: str, subject: str, since: datetime
    ) -> None:
        """Count the usage one partition's stream holds past where it was read to."""
        request: dict[str, object] = {"next_by_subj": subject, "batch": _PAGE}
        done = usage.stream_seqs.get(partition, 0)
        if done:
            request["seq"] = done + 1
        else:
            request["start_time"] = since.strftime("%Y-%m-%dT%H:%M:%SZ")
        while True:
            count = 0
            async for msg in direct_batch(self._bus.nc, stream, request, self._timeout):
                count += 1
                if event_type_of(msg) not in (_USAGE, None):
                    seq = int((msg.headers or {}).get("Nats-Sequence", "0"))
                    done = max(done, seq)
                    continue
                recorded = record_from_direct_get(msg)
                done = max(done, recorded.stream_seq)
                if isinstance(recorded, RecordedEvent):
                    _count(usage, recorded)
            usage.stream_seqs[partition] = done
            if count < _PAGE:
                return
            request = {"seq": done + 1, "next_by_subj": subject, "batch": _PAGE}

    async def _set_of(self, tenant: str, aggregate: str, aggregate_id: str) -> _Set:
        kept = self._sets.setdefault((aggregate, f"{tenant}.{aggregate_id}"), _Set())
        if time.monotonic() - kept.checked < self._refresh:
            return kept
        events, kept.position = await self._bus.store.read_positioned(
            tenant,
            "tenant" if aggregate == "tenant" else "agency",
            aggregate_id,
            after=kept.position,
        )
        for event in events:
            match event.payload:
                case (
                    TenantBudgetSet(tokens=tokens, usd=usd)
                    | AgencyBudgetSet(tokens=tokens, usd=usd)
                ):
                    kept.tokens, kept.usd = tokens, usd
        kept.checked = time.monotonic()
        return kept


def _in_force(budget: Budget) -> bool:
    return bool(budget.tokens or budget.usd)


def _count(usage: _Usage, recorded: RecordedEvent) -> None:
    payload = recorded.payload
    if not isinstance(payload, ModelCompleted) or recorded.envelope.ts < usage.since:
        return
    tokens = payload.usage.input_tokens + payload.usage.output_tokens
    usage.total = usage.total.plus(tokens, payload.cost_usd)
    agency = recorded.envelope.agency_id or ""
    usage.agencies[agency] = usage.agencies.get(agency, Spent()).plus(tokens, payload.cost_usd)
