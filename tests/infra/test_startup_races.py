"""Services started at the same instant on a fresh system all come up, and a first start cut
short leaves a system that starts next time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest

from agency.contracts.subjects import COMMANDS_STREAM, DEAD_LETTER_STREAM, EVENTS_STREAM
from agency.infra.db import create_pool, migrate, migration_scripts
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import ALL_DURABLES, RUNTIME_TRIGGERS, ensure_consumer
from agency.infra.jetstream.streams import provision
from agency.infra.launch import NatsServer
from agency.projections.catalog import ALL
from agency.projections.setup import prepare_read_models
from tests.helpers import fresh_database

STARTS = 6


async def start_like_a_service(nats_url: str, database_url: str, durable: str) -> None:
    """What a service process does on its first start: provision, migrate, create its
    read models and its durable consumer."""
    pool = await create_pool(database_url, max_size=2)
    try:
        async with Bus(nats_url, name="race") as bus:
            await provision(bus.js)
            async with pool.acquire() as conn:
                await migrate(conn)
            await prepare_read_models(pool)
            config = RUNTIME_TRIGGERS.config(ack_wait=5.0)
            config.durable_name = durable
            sub = await ensure_consumer(bus.js, config)
            await sub.unsubscribe()
    finally:
        await asyncio.wait_for(pool.close(), timeout=10)


async def assert_started(nats_url: str, database_url: str, durables: set[str]) -> None:
    async with Bus(nats_url, name="check") as bus:
        for stream in (EVENTS_STREAM, COMMANDS_STREAM, DEAD_LETTER_STREAM):
            await bus.js.stream_info(stream)
        consumers = {c.name for c in await bus.js.consumers_info(EVENTS_STREAM)}
        assert {spec.name for spec in ALL_DURABLES} | durables <= consumers
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        applied = await conn.fetch("SELECT name FROM agency_schema_migrations ORDER BY name")
        assert [r["name"] for r in applied] == [name for name, _ in migration_scripts()]
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        for projection in ALL:
            assert set(projection.all_tables) <= tables, projection.name
        checkpoints = await conn.fetchval("SELECT count(*) FROM agency_projection_checkpoints")
        assert checkpoints == len(ALL)
    finally:
        await conn.close(timeout=5)


async def test_services_started_at_the_same_instant_on_a_fresh_system_all_come_up(
    tmp_path: Path, database_url: str
) -> None:
    db_url = await fresh_database(database_url, "race")
    async with NatsServer(tmp_path / "nats", sync_interval="default") as server:
        # Half the starts share one durable (copies of a service), half have their own.
        durables = [f"race-{i % (STARTS // 2)}" for i in range(STARTS)]
        results = await asyncio.gather(
            *(start_like_a_service(server.url, db_url, d) for d in durables),
            return_exceptions=True,
        )
        assert [r for r in results if r is not None] == []
        await assert_started(server.url, db_url, set(durables))


@pytest.mark.parametrize("cut_after", [0.0, 0.05, 0.2])
async def test_a_first_start_cut_short_leaves_a_system_that_starts(
    tmp_path: Path, database_url: str, cut_after: float
) -> None:
    db_url = await fresh_database(database_url, "race")
    async with NatsServer(tmp_path / "nats", sync_interval="default") as server:
        starts = [
            asyncio.create_task(start_like_a_service(server.url, db_url, f"cut-{i}"))
            for i in range(STARTS)
        ]
        # A crash mid-start: every start is cancelled wherever it has got to.
        await asyncio.wait(starts, timeout=cut_after)
        for start in starts:
            start.cancel()
        await asyncio.gather(*starts, return_exceptions=True)

        await start_like_a_service(server.url, db_url, "after")
        await assert_started(server.url, db_url, {"after"})
