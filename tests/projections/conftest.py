from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import asyncpg
import pytest

from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.projections.engine import ProjectionRunner
from agency.projections.projection import Projection
from tests.helpers import fresh_database


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A database of the test's own, so projections of different tests never meet."""
    url = await fresh_database(database_url, "p")
    created = await create_pool(url, max_size=4)
    async with created.acquire() as conn:
        await migrate(conn)
    try:
        yield created
    finally:
        await asyncio.wait_for(created.close(), timeout=10)


RunProjection = Callable[[Projection], Awaitable[ProjectionRunner]]


@pytest.fixture
async def run_projection(pool: asyncpg.Pool, bus: Bus) -> AsyncIterator[RunProjection]:
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def start(projection: Projection) -> ProjectionRunner:
        runner = ProjectionRunner(pool, bus.js, projection, dead_letters=bus.dead_letters)
        tasks.append(asyncio.create_task(runner.run(stop)))
        return runner

    yield start
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


Apply = Callable[[asyncpg.Connection, Sequence[RecordedEvent]], Awaitable[None]]


async def count_event(conn: asyncpg.Connection, event: RecordedEvent) -> None:
    """One more event of its type in `counts`, and its stream sequence the type's last."""
    await conn.execute(
        "INSERT INTO counts (type, n, last_seq) VALUES ($1, 1, $2) "
        "ON CONFLICT (type) DO UPDATE SET n = counts.n + 1, last_seq = EXCLUDED.last_seq",
        event.type,
        event.stream_seq,
    )


def counts_projection(name: str, apply: Apply) -> Projection:
    """A projection `name` writing the table `counts` (one row per event type) by `apply`."""
    return Projection(
        name=name,
        tables=("counts",),
        ddl="CREATE TABLE IF NOT EXISTS counts (type text PRIMARY KEY, n int NOT NULL, last_seq bigint NOT NULL)",
        apply=apply,
    )


def counting_projection(name: str, tenant: str) -> Projection:
    """Counts one tenant's events per type: small, deterministic, order-sensitive rows."""

    async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
        mine = [e for e in events if e.envelope.tenant_id == tenant]
        for e in mine:
            await count_event(conn, e)

    return counts_projection(name, apply)
