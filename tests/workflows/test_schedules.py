"""Cron schedules: kept in the log, fired once per tick however many schedulers run."""

from __future__ import annotations

import asyncio
from collections import Counter

from hypothesis import given, settings, strategies as st

from agency.contracts.commands import SetSchedule
from agency.contracts.events import (
    BlueprintSpec,
    ScheduleFired,
    ScheduleOptions,
    ScheduleRemoved,
    ScheduleSet,
)
from agency.contracts.ids import new_id
from agency.domain.cron import CRON_PATTERN, cron_problem, next_tick, timezone_problem
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, Position
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.workflows.engine.scheduler import Scheduler, due_tick, firing_tick
from tests.helpers import assert_eventually
from tests.workflows.conftest import Workflows


async def test_two_schedulers_fire_each_tick_once(workflows: Workflows, nats_url: str) -> None:
    t = workflows.tenant
    workflows.agents.llm.script(f"cron-{t}", [ScriptStep(content=f"tick {i}") for i in range(20)])
    wf = await workflows.create(
        "nightly", {"bot": BlueprintSpec(name="bot", prompt=f"Your script is cron-{t}.")}
    )
    schedule = "sch_" + new_id()
    await workflows.bus.commands.send(
        t,
        SetSchedule(
            agency_id=workflows.agents.agency, schedule_id=schedule, name="every-second",
            cron="* * * * * *", target="workflow", workflow_id=wf, agent="bot",
            message="run the nightly job",
        ),
    )  # fmt: skip
    stop = asyncio.Event()
    # A second replica beside the one the workflows service runs.
    async with Bus(nats_url, name="second-scheduler") as second:
        replica = asyncio.create_task(Scheduler(second, interval=0.1).run(stop))
        try:

            async def fired() -> list[ScheduleFired]:
                history = await workflows.bus.store.read(t, "schedule", schedule)
                ticks = [e.payload for e in history if isinstance(e.payload, ScheduleFired)]
                assert len(ticks) >= 3
                return ticks

            await assert_eventually(fired, timeout=20)
        finally:
            stop.set()
            await asyncio.wait_for(replica, timeout=10)
    history = await workflows.bus.store.read(t, "schedule", schedule)
    ticks = [e.payload.tick for e in history if isinstance(e.payload, ScheduleFired)]
    assert len(ticks) == len(set(ticks)), Counter(ticks)
    assert ticks == sorted(ticks)
    # Each firing posted its message once.
    state = await workflows.wait(
        wf, lambda s: sum(m.sender == "schedule:every-second" for m in s.messages) >= len(ticks)
    )
    posted = [m for m in state.messages if m.sender == "schedule:every-second"]
    assert len({m.message_id for m in posted}) == len(posted)
    assert all(m.mentions == ("bot",) for m in posted)


async def test_a_schedule_survives_a_restart_of_every_scheduler(bus: Bus, tenant: str) -> None:
    """A scheduler keeps nothing of its own: a new one learns each schedule, and the ticks
    already fired, from the log, and goes on firing the next ticks once each."""
    schedule, agency = "sch_" + new_id(), new_id()
    set_ = ScheduleSet(
        agency_id=agency, name="restart", cron="* * * * * *", target="workflow",
        workflow_id="wf_" + new_id(), message="tick",
    )  # fmt: skip
    context = EventContext(agency_id=agency)
    await bus.store.append(
        tenant, "schedule", schedule, [set_], expected=Position(), context=context
    )

    async def ticks() -> list[ScheduleFired]:
        history = await bus.store.read(tenant, "schedule", schedule)
        return [e.payload for e in history if isinstance(e.payload, ScheduleFired)]

    async def run_until(fired: int) -> Scheduler:
        scheduler, stop = Scheduler(bus, interval=0.1), asyncio.Event()
        task = asyncio.create_task(scheduler.run(stop))
        try:

            async def enough() -> None:
                assert len(await ticks()) >= fired

            await assert_eventually(enough, timeout=20)
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=10)
        return scheduler

    try:
        await run_until(2)
        before = [t.tick for t in await ticks()]
        # Nothing runs in between; then a scheduler that knows only the log.
        restarted = await run_until(len(before) + 2)
        after = [t.tick for t in await ticks()]
        assert after[: len(before)] == before and len(after) == len(set(after))
        assert after == sorted(after) and after[len(before)] > before[-1]
        [entry] = [e for e in restarted.schedules if e.schedule_id == schedule]
        assert entry.spec == set_ and entry.since >= after[-1]
    finally:
        position = await bus.store.last_position(tenant, "schedule", schedule)
        await bus.store.append(
            tenant, "schedule", schedule, [ScheduleRemoved(reason="test over")],
            expected=position, context=context,
        )  # fmt: skip


def test_cron_expressions_are_checked() -> None:
    assert cron_problem("*/5 * * * *") is None
    assert "5 fields" in (cron_problem("* *") or "")
    assert "not a valid" in (cron_problem("61 * * * *") or "")
    # What the document's pattern leaves out is refused, though the cron library reads it.
    for outside in ("0 9 * * mon", "0 9 ? * 1", "0 9 L * *", "0 9 * * 1#2", "0\t9 * * * *"):
        assert "not a valid" in (cron_problem(outside) or ""), outside


@settings(max_examples=300, deadline=None)
@given(st.from_regex(CRON_PATTERN, fullmatch=True))
def test_every_expression_the_documented_pattern_admits_is_accepted(expression: str) -> None:
    assert cron_problem(expression) is None


def test_a_missed_stretch_fires_its_latest_tick_only() -> None:
    from datetime import UTC, datetime

    since = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 3, 30, tzinfo=UTC)
    assert due_tick("0 * * * *", since, now) == datetime(2026, 1, 1, 3, 0, tzinfo=UTC)
    assert due_tick("0 * * * *", now, now) is None


def _spec(cron: str, **options: object) -> ScheduleSet:
    return ScheduleSet(
        agency_id="a", name="n", cron=cron, target="agent", agent="bot",
        options=ScheduleOptions(**options),  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_schedule_ticks_on_the_clocks_of_its_time_zone() -> None:
    from datetime import UTC, datetime

    since = datetime(2026, 7, 1, 0, 0, tzinfo=UTC)
    now = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    # 09:00 in Paris in summer is 07:00 UTC; in winter, 08:00 UTC.
    assert firing_tick(_spec("0 9 * * *", timezone="Europe/Paris"), since, now) == datetime(
        2026, 7, 1, 7, 0, tzinfo=UTC
    )
    winter = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    assert next_tick("0 9 * * *", winter, "Europe/Paris") == datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
    assert timezone_problem("Europe/Paris") is None
    assert "IANA" in (timezone_problem("Mars/Olympus") or "")


def test_a_disabled_schedule_or_one_past_its_end_does_not_fire() -> None:
    from datetime import UTC, datetime

    since = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    now = datetime(2026, 1, 1, 3, 30, tzinfo=UTC)
    assert firing_tick(_spec("0 * * * *", enabled=False), since, now) is None
    ended = _spec("0 * * * *", end_time=datetime(2026, 1, 1, 1, 30, tzinfo=UTC))
    assert firing_tick(ended, since, now) == datetime(2026, 1, 1, 1, 0, tzinfo=UTC)
    assert firing_tick(ended, datetime(2026, 1, 1, 1, 0, tzinfo=UTC), now) is None


def test_a_schedule_firing_more_often_than_the_minimum_interval_is_refused() -> None:
    from agency.services.tenancy.fairness import ScheduleLimits, refuse_schedule, schedule_problem

    limits = ScheduleLimits()  # the documented defaults: 10 s, 20 schedules per tenant
    assert "fires every 1 s" in (schedule_problem("* * * * * *", limits) or "")
    assert "at most once every 10 s" in (schedule_problem("* * * * * */5", limits) or "")
    assert schedule_problem("* * * * * */10", limits) is None
    assert schedule_problem("*/5 * * * *", limits) is None
    assert "not a valid" in (schedule_problem("61 * * * *", limits) or "")
    assert refuse_schedule(19, limits) is None
    assert "the limit is 20" in (refuse_schedule(20, limits) or "")


async def test_a_tenants_fires_beyond_its_rate_are_skipped_and_fast_ticks_coalesced(
    bus: Bus, tenant: str
) -> None:
    from datetime import timedelta

    from structlog.testing import capture_logs

    from agency.contracts.envelope import utc_now
    from agency.services.tenancy.fairness import ScheduleLimits

    agency = new_id()
    context = EventContext(agency_id=agency)
    ids = ["sch_" + new_id(), "sch_" + new_id()]
    scheduler = Scheduler(
        bus, limits=ScheduleLimits(min_interval=10.0, fires_per_minute=1.0, fire_burst=1)
    )
    for schedule in ids:
        set_ = ScheduleSet(
            agency_id=agency, name=schedule, cron="* * * * * *", target="workflow",
            workflow_id="wf_" + new_id(), message="tick",
        )  # fmt: skip
        result = await bus.store.append(
            tenant, "schedule", schedule, [set_], expected=Position(), context=context
        )
        scheduler.apply(result.events[0])

    async def fired(schedule: str) -> int:
        history = await bus.store.read(tenant, "schedule", schedule)
        return sum(isinstance(e.payload, ScheduleFired) for e in history)

    now = utc_now() + timedelta(seconds=30)
    with capture_logs() as logs:
        await scheduler.fire_due(now)
    # One token: the first schedule fires, the second's tick is skipped with the reason.
    assert [await fired(s) for s in ids] == [1, 0]
    assert scheduler.skipped == {tenant: 1}
    [skipped] = [e for e in logs if e["event"] == "schedule fire skipped"]
    assert skipped["schedule"] == ids[1] and skipped["reason"].startswith("tenant_schedule_rate")
    # Within the minimum interval neither fires, though their cron ticks every second.
    await scheduler.fire_due(now + timedelta(seconds=5))
    assert [await fired(s) for s in ids] == [1, 0] and scheduler.skipped == {tenant: 1}
