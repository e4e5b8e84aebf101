"""Creating every read model's tables up front, so queries work before the first event."""

from __future__ import annotations

import asyncpg

from agency.projections.catalog import ALL
from agency.projections.engine import LIVE_SCHEMA, ensure_checkpoint, ensure_tables


async def prepare_read_models(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        for projection in ALL:
            await ensure_tables(conn, projection, LIVE_SCHEMA)
            await ensure_checkpoint(conn, projection.name)
