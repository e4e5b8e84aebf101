"""A pool's connections beyond its minimum end once idle for its idle lifetime, and the pool
serves on."""

from __future__ import annotations

import asyncio

import asyncpg

from agency.infra.db import create_pool
from tests.helpers import assert_eventually


async def test_idle_connections_beyond_the_minimum_end_and_the_pool_serves_on(
    database_url: str,
) -> None:
    pool = await create_pool(database_url, max_size=3, idle_lifetime=0.5)
    try:
        held = [await pool.acquire() for _ in range(3)]
        pids = {await c.fetchval("SELECT pg_backend_pid()") for c in held}
        for conn in held:
            await pool.release(conn)
        watcher = await asyncpg.connect(database_url, timeout=10)
        try:

            async def ended() -> None:
                alive = await watcher.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])",
                    list(pids),
                )
                assert alive == 1  # the pool's minimum stays open

            await assert_eventually(ended, timeout=10)
        finally:
            await watcher.close()
        async with asyncio.timeout(10):
            assert await pool.fetchval("SELECT 1") == 1
    finally:
        await pool.close()
