"""Projections of a log in three partitions: a group per partition, a checkpoint per
projection and partition, and a rebuild from every partition equal to the live rows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from agency.contracts.partitions import EventLayout, checkpoint_name
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.launch import NatsServer
from agency.projections.catalog import by_name
from agency.projections.checksum import projection_checksum
from agency.projections.group import ProjectionGroup
from agency.projections.rebuild import last_stream_seqs, rebuild
from tests.projections.test_engine import write_thread

LAYOUT = EventLayout(3)


@pytest.fixture
async def partitioned_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    async with NatsServer(tmp_path / "nats", sync_interval="default") as server:
        async with Bus(server.url, name="admin") as admin:
            await provision(admin.js, StreamSettings(partitions=3))
        async with Bus(server.url, name="projections") as bus:
            yield bus


async def test_a_group_per_partition_applies_its_partition_and_a_rebuild_equals_them(
    partitioned_bus: Bus, tenant: str, pool: asyncpg.Pool
) -> None:
    bus = partitioned_bus
    threads = [await write_thread(bus, tenant, 2) for _ in range(12)]
    while {LAYOUT.partition(t) for t in threads} != {0, 1, 2} and len(threads) < 60:
        threads.append(await write_thread(bus, tenant, 2))  # ids are random: every partition
    assert {LAYOUT.partition(t) for t in threads} == {0, 1, 2}
    events = by_name("events")
    stop = asyncio.Event()
    groups = [
        ProjectionGroup(
            pool, bus.js, [events], dead_letters=bus.dead_letters, layout=LAYOUT, partition=p
        )
        for p in range(3)
    ]
    tasks = [asyncio.create_task(g.run(stop)) for g in groups]
    try:
        ends = await last_stream_seqs(bus.js, LAYOUT)
        for p, group in enumerate(groups):
            await group.wait_until(ends[p], timeout=30)
        async with pool.acquire() as conn:
            stored = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
            rows = await conn.fetch("SELECT name, stream_seq FROM agency_projection_checkpoints")
        assert stored == len(threads) * 5
        assert {r["name"]: r["stream_seq"] for r in rows} == {
            checkpoint_name("events", p): ends[p] for p in range(3)
        }
        assert set(ends.values()) != {0}

        async with pool.acquire() as conn:
            live = await projection_checksum(conn, events)
        result = await rebuild(pool, bus.js, events, layout=LAYOUT)
        assert result.swapped
        async with pool.acquire() as conn:
            assert await projection_checksum(conn, events) == live
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
