"""Cron schedules: each is an aggregate (`schedule.set`, `schedule.removed`,
`schedule.fired`), so schedules survive any restart and their firings are in the log.

Every copy of the service runs a scheduler. Each reads all schedules from the log (an
ordered reader from the start, then live) and, when a tick is due, appends
`schedule.fired(tick)` to the schedule with the expected sequence it read and the key
`fire:<tick>`: of several schedulers seeing the same tick one append wins, the others
reload, find the tick fired and do nothing. The controller then acts on the fired event
once (its durable consumer). Ticks missed while no scheduler ran are not replayed one by
one: the latest due tick fires once. A schedule's ticks are read on the clocks of its time
zone (`options.timezone`); one disabled (`options.enabled`) or past its `end_time` does not
fire.

Each scheduler holds every tenant to its `ScheduleLimits` as it fires: a schedule fires at
most once every `min_interval` seconds (a stored cron that ticks faster has its ticks
coalesced: the latest due tick fires once the interval has passed), and a tenant's fires
beyond `fires_per_minute` (a token bucket per tenant, per scheduler) are skipped with a
warning naming the reason, `tenant_schedule_rate`. A skipped tick is not recorded; the
schedule's next tick fires as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import structlog
from nats.errors import Error as NatsError

from agency.contracts.envelope import utc_now
from agency.contracts.events import AnyEvent, ScheduleFired, ScheduleRemoved, ScheduleSet
from agency.domain.cron import ticks_after
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import StoreError
from agency.infra.jetstream.reader import OrderedReader
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.decide import Decision, DecisionConflict, decide_and_append
from agency.services.tenancy.fairness import SCHEDULE_RATE, ScheduleLimits

log = structlog.get_logger(__name__)

ALL_SCHEDULES = "tenant.*.evt.schedule.>"
# A schedule idle for longer than this catches up from this far back only.
_CATCH_UP = timedelta(days=1)


def due_tick(cron: str, since: datetime, now: datetime, timezone: str = "UTC") -> datetime | None:
    """The latest tick in (since, now], in UTC, or None."""
    since = max(since, now - _CATCH_UP)
    ticks = ticks_after(cron, since, timezone)
    latest: datetime | None = None
    while True:
        tick: datetime = ticks.get_next(datetime).astimezone(UTC)
        if tick > now:
            return latest
        latest = tick


def firing_tick(spec: ScheduleSet, since: datetime, now: datetime) -> datetime | None:
    """The tick `spec` fires now, if any: none while disabled or after its `end_time`."""
    options = spec.options
    if not options.enabled:
        return None
    if options.end_time is not None:
        now = min(now, options.end_time)
    return due_tick(spec.cron, since, now, options.timezone)


@dataclass(frozen=True, slots=True)
class Entry:
    tenant_id: str
    schedule_id: str
    spec: ScheduleSet
    since: datetime


def fired_decision(tick: datetime) -> Decision:
    def decide(history: list[RecordedEvent]) -> list[AnyEvent]:
        if not history or any(isinstance(e.payload, ScheduleRemoved) for e in history):
            return []
        fired = [e.payload.tick for e in history if isinstance(e.payload, ScheduleFired)]
        if fired and max(fired) >= tick:
            return []
        return [ScheduleFired(tick=tick)]

    return decide


class Scheduler:
    def __init__(
        self, bus: Bus, *, interval: float = 1.0, limits: ScheduleLimits | None = None
    ) -> None:
        self._bus = bus
        self._interval = interval
        self._limits = limits or ScheduleLimits.from_env()
        self._buckets = self._limits.fire_buckets()
        self._entries: dict[tuple[str, str], Entry] = {}
        # Ticks skipped over the tenant's fire rate, per tenant, since this scheduler began.
        self.skipped: dict[str, int] = {}

    @property
    def schedules(self) -> list[Entry]:
        return list(self._entries.values())

    def apply(self, event: RecordedEvent) -> None:
        env = event.envelope
        key = (env.tenant_id, env.aggregate_id)
        match event.payload:
            case ScheduleSet() as spec:
                entry = self._entries.get(key)
                # Enabled again: the ticks it slept through are not caught up.
                resumed = entry is not None and not entry.spec.options.enabled
                since = entry.since if entry and not resumed else env.ts
                self._entries[key] = Entry(env.tenant_id, env.aggregate_id, spec, since)
            case ScheduleRemoved():
                self._entries.pop(key, None)
            case ScheduleFired(tick=tick):
                entry = self._entries.get(key)
                if entry is not None and tick > entry.since:
                    self._entries[key] = replace(entry, since=tick)

    async def run(self, stop: asyncio.Event) -> None:
        layout = self._bus.layout
        async with contextlib.AsyncExitStack() as readers:
            # A reader per partition of the log (a schedule's events are in one of them).
            opened = [
                await readers.enter_async_context(
                    OrderedReader(
                        self._bus.js,
                        ALL_SCHEDULES if not layout.partitioned else f"tenant.*.evt.{p}.schedule.>",
                        stream=layout.stream(p),
                    )
                )
                for p in range(layout.partitions)
            ]
            while not stop.is_set():
                for reader in opened:
                    timeout = self._interval / len(opened)
                    for delivered in await reader.next_batch(timeout=timeout):
                        if isinstance(delivered, RecordedEvent):
                            self.apply(delivered)
                await self.fire_due(utc_now())

    async def fire_due(self, now: datetime) -> None:
        for entry in list(self._entries.values()):
            tick = firing_tick(entry.spec, entry.since, now)
            if tick is None:
                continue
            if (now - entry.since).total_seconds() < self._limits.min_interval:
                continue  # coalesced: the latest due tick fires once the interval is over
            wait = self._buckets.take(entry.tenant_id, now.timestamp())
            if wait is not None:
                self._skip(entry, tick)
                continue
            try:
                await self._fire(entry, tick)
            except (StoreError, NatsError, TimeoutError, DecisionConflict) as e:
                # Tried again on the next pass; another replica may fire it meanwhile.
                log.warning("schedule firing failed", schedule=entry.schedule_id, error=str(e))

    def _skip(self, entry: Entry, tick: datetime) -> None:
        self.skipped[entry.tenant_id] = self.skipped.get(entry.tenant_id, 0) + 1
        log.warning(
            "schedule fire skipped",
            tenant_id=entry.tenant_id,
            schedule=entry.schedule_id,
            tick=tick.isoformat(),
            reason=f"{SCHEDULE_RATE}: the tenant's schedules may fire "
            f"{self._limits.fires_per_minute:g} times a minute",
        )
        key = (entry.tenant_id, entry.schedule_id)
        if key in self._entries:
            self._entries[key] = replace(self._entries[key], since=tick)

    async def _fire(self, entry: Entry, tick: datetime) -> None:
        result = await decide_and_append(
            self._bus.store, entry.tenant_id, "schedule", entry.schedule_id,
            fired_decision(tick),
            context=EventContext(agency_id=entry.spec.agency_id),
            idempotency_key=f"fire:{tick.isoformat()}",
        )  # fmt: skip
        if result.events:
            log.info("schedule fired", schedule=entry.schedule_id, tick=tick.isoformat())
        key = (entry.tenant_id, entry.schedule_id)
        if key in self._entries:
            self._entries[key] = replace(self._entries[key], since=tick)
