"""Projections fed by one reader and committed together, against real NATS and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.projections import engine, follower
from agency.projections.catalog import by_name
from agency.projections.group import ProjectionGroup
from agency.projections.projection import Projection
from agency.projections.rebuild import last_stream_seq
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually
from tests.projections.conftest import RunProjection, counting_projection
from tests.projections.test_engine import caught_up, write_thread


@pytest.fixture
async def stop() -> AsyncIterator[asyncio.Event]:
    event = asyncio.Event()
    yield event
    event.set()


async def run_group(
    pool: asyncpg.Pool, bus: Bus, projections: Sequence[Projection], stop: asyncio.Event
) -> tuple[ProjectionGroup, asyncio.Task[None]]:
    group = ProjectionGroup(pool, bus.js, projections, dead_letters=bus.dead_letters)
    task = asyncio.create_task(group.run(stop))
    await group.wait_until(await last_stream_seq(bus.js), timeout=30)
    return group, task


async def checkpoints(pool: asyncpg.Pool) -> dict[str, int]:
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT name, stream_seq FROM agency_projection_checkpoints")
    return {r["name"]: r["stream_seq"] for r in rows}


async def test_every_projection_of_the_group_applies_the_log_and_moves_its_checkpoint(
    bus: Bus, tenant: str, pool: asyncpg.Pool, stop: asyncio.Event
) -> None:
    await write_thread(bus, tenant, 3)
    _, task = await run_group(
        pool, bus, [by_name("events"), counting_projection("counts", tenant)], stop
    )
    last = await last_stream_seq(bus.js)
    async with pool.acquire() as conn:
        stored = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
        counts = {r["type"]: r["n"] for r in await conn.fetch("SELECT type, n FROM counts")}
    assert stored == 7
    assert counts == {"thread.created": 1, "message.appended": 3, "run.tick": 3}
    assert await checkpoints(pool) == {"counts": last, "events": last}
    stop.set()
    await asyncio.wait_for(task, timeout=10)


async def test_a_projection_behind_the_others_catches_up_without_the_others_applying_twice(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection, stop: asyncio.Event
) -> None:
    await write_thread(bus, tenant, 2)
    counts = counting_projection("counts", tenant)
    alone = await run_projection(counts)
    await caught_up(alone, bus)
    await write_thread(bus, tenant, 1)
    # `counts` is at the log's end but for the last thread; `events` starts from nothing.
    _, task = await run_group(pool, bus, [by_name("events"), counts], stop)
    async with pool.acquire() as conn:
        stored = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
        rows = {r["type"]: r["n"] for r in await conn.fetch("SELECT type, n FROM counts")}
    assert stored == 5 + 3
    assert rows == {"thread.created": 2, "message.appended": 3, "run.tick": 3}
    stop.set()
    await asyncio.wait_for(task, timeout=10)


async def test_an_event_one_projection_cannot_apply_is_dead_lettered_for_it_alone(
    bus: Bus, tenant: str, pool: asyncpg.Pool, stop: asyncio.Event
) -> None:
    thread = await write_thread(bus, tenant, 2)
    poison = (await bus.store.read(tenant, "thread", thread))[1].stream_seq

    async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
        for e in events:
            if e.stream_seq == poison:
                await conn.execute("SELECT 1 / 0")
            await conn.execute("INSERT INTO picky (seq) VALUES ($1)", e.stream_seq)

    picky = Projection(
        name="picky_" + new_id().lower(),
        tables=("picky",),
        ddl="CREATE TABLE IF NOT EXISTS picky (seq bigint PRIMARY KEY)",
        apply=apply,
    )
    _, task = await run_group(pool, bus, [by_name("events"), picky], stop)
    async with pool.acquire() as conn:
        stored = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
        picked = {r["seq"] for r in await conn.fetch("SELECT seq FROM picky")}
    mine = {e.stream_seq for e in await bus.store.read(tenant, "thread", thread)}
    assert stored == 5
    assert mine - picked == {poison}
    letters = await dead_letters_for(bus, tenant)
    assert [(reason, picky.name in detail) for reason, detail, _ in letters] == [
        ("projection_failed", True)
    ]
    stop.set()
    await asyncio.wait_for(task, timeout=10)


async def test_the_group_announces_every_projection_s_progress(
    bus: Bus, tenant: str, pool: asyncpg.Pool, stop: asyncio.Event
) -> None:
    counts = counting_projection("counts", tenant)
    heard: dict[str, int] = {}

    def notified(_: object, __: int, ___: str, payload: str) -> None:
        name, _sep, seq = payload.rpartition(":")
        heard[name] = max(heard.get(name, 0), int(seq))

    async with pool.acquire() as listener:
        await listener.add_listener(engine.PROGRESS_CHANNEL, notified)
        await write_thread(bus, tenant, 1)
        group, task = await run_group(pool, bus, [by_name("events"), counts], stop)

        async def both_heard() -> None:
            assert heard == {"counts": group.position, "events": group.position}

        await assert_eventually(both_heard)
        await listener.remove_listener(engine.PROGRESS_CHANNEL, notified)
    stop.set()
    await asyncio.wait_for(task, timeout=10)


async def test_commits_lost_while_the_log_is_quiet_are_applied_again_to_every_projection(
    bus: Bus, tenant: str, pool: asyncpg.Pool, stop: asyncio.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database loses the group's last commit (every projection's rows and checkpoint)
    and no event follows: the group finds it out on its own and applies it again."""
    monkeypatch.setattr(follower, "STALL_CHECK", 0.5)
    await write_thread(bus, tenant, 2)
    group, task = await run_group(
        pool, bus, [by_name("events"), counting_projection("counts", tenant)], stop
    )
    before = await checkpoints(pool)
    async with pool.acquire() as conn:
        counted = await conn.fetch("SELECT type, n, last_seq FROM counts")
    await write_thread(bus, tenant, 1)
    await group.wait_until(await last_stream_seq(bus.js), timeout=30)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM events WHERE stream_seq > $1", before["events"])
        await conn.execute("DELETE FROM counts")
        await conn.executemany(
            "INSERT INTO counts (type, n, last_seq) VALUES ($1, $2, $3)",
            [(r["type"], r["n"], r["last_seq"]) for r in counted],
        )
        for name, seq in before.items():
            await conn.execute(
                "UPDATE agency_projection_checkpoints SET stream_seq = $1 WHERE name = $2",
                seq,
                name,
            )
    last = await last_stream_seq(bus.js)

    async def applied_again() -> None:
        async with pool.acquire() as conn:
            stored = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
            rows = {r["type"]: r["n"] for r in await conn.fetch("SELECT type, n FROM counts")}
        assert stored == 5 + 3
        assert rows == {"thread.created": 2, "message.appended": 3, "run.tick": 3}
        assert await checkpoints(pool) == {"counts": last, "events": last}

    await assert_eventually(applied_again, timeout=20)
    stop.set()
    await asyncio.wait_for(task, timeout=10)
