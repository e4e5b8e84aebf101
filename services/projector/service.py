"""Runs every projection of the catalogue, each with its own checkpoint."""

from __future__ import annotations

import asyncio

import structlog

from infra.db import create_pool
from infra.jetstream.connection import Bus
from projections.catalog import ALL
from projections.engine import ProjectionRunner
from projections.projection import Projection

log = structlog.get_logger(__name__)


async def run_projector(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    projections: tuple[Projection, ...] = ALL,
) -> None:
    # The projector sets roles and schemas with `SET LOCAL` only: no session to reset.
    pool = await create_pool(database_url, max_size=len(projections) + 2, session_state=False)
    try:
        async with Bus(nats_url, name="agency-projector") as bus, asyncio.TaskGroup() as tg:
            for projection in projections:
                runner = ProjectionRunner(pool, bus.js, projection, dead_letters=bus.dead_letters)
                tg.create_task(runner.run(stop), name=f"projection-{projection.name}")
            log.info("projector running", projections=[p.name for p in projections])
    finally:
        await asyncio.wait_for(pool.close(), timeout=10)
