"""A worker with lanes over a real consumer: one tenant's hot aggregate runs one handler at
a time and holds at most its share, the excess dead-lettered with the reason, while another
tenant's events are handled meanwhile."""

from __future__ import annotations

import asyncio
from collections import Counter

from agency.contracts.events import ThreadCreated
from agency.contracts.ids import new_id
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import DurableSpec
from agency.infra.jetstream.eventworker import EventWorker
from agency.infra.jetstream.records import Position, RecordedEvent
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually
from tests.store.test_worker import FAST_RETRY, new_events_consumer

HOT_EVENTS = 6
TENANT_HELD = 3


async def test_a_hot_aggregate_takes_one_lane_and_its_tenants_share_while_others_go_on(
    bus: Bus, tenant: str
) -> None:
    hot, cool = tenant, tenant + "c"
    gate = asyncio.Event()
    handled: list[tuple[str, str]] = []
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()

    async def handler(event: RecordedEvent) -> None:
        env = event.envelope
        if env.tenant_id not in (hot, cool):
            return
        running[env.aggregate_id] += 1
        most[env.aggregate_id] = max(most[env.aggregate_id], running[env.aggregate_id])
        try:
            if env.tenant_id == hot:
                await gate.wait()
            handled.append((env.tenant_id, env.aggregate_id))
        finally:
            running[env.aggregate_id] -= 1

    spec = DurableSpec("test-lanes-" + tenant, ("thread.created",))
    await new_events_consumer(bus, spec)
    worker = EventWorker(
        bus, spec, handler,
        concurrency=2, held=8, tenant_held=TENANT_HELD, retry=FAST_RETRY,
        lane=lambda e: (e.envelope.tenant_id, e.envelope.aggregate_id),
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        thread = new_id()
        created = ThreadCreated(agency_id="a1", agent_type="helper")
        await bus.store.append(hot, "thread", thread, [created] * HOT_EVENTS, expected=Position())
        others = [new_id(), new_id()]
        for other in others:
            await bus.store.append(cool, "thread", other, [created], expected=Position())

        async def cool_handled() -> None:
            assert sorted(a for t, a in handled if t == cool) == sorted(others)

        # The hot thread's first handler is still held at the gate.
        await assert_eventually(cool_handled, timeout=20)

        async def excess_dead_lettered() -> list[tuple[str, str, bytes]]:
            letters = await dead_letters_for(bus, hot)
            assert len(letters) == HOT_EVENTS - TENANT_HELD
            return letters

        letters = await assert_eventually(excess_dead_lettered, timeout=20)
        assert {reason for reason, _, _ in letters} == {"tenant_backlog"}
        assert all(f"the bound is {TENANT_HELD}" in detail for _, detail, _ in letters)
        assert handled.count((hot, thread)) == 0
        gate.set()

        async def held_ones_handled() -> None:
            assert handled.count((hot, thread)) == TENANT_HELD

        await assert_eventually(held_ones_handled, timeout=20)
        assert most[thread] == 1
    finally:
        gate.set()
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await bus.js.delete_consumer(EVENTS_STREAM, spec.name)
