"""Runs every projection of the catalogue, each with its own checkpoint, fed by one reader
and committed together (`projections/group.py`)."""

from __future__ import annotations

import asyncio

import structlog

from agency.infra.db import create_pool
from agency.infra.jetstream.connection import Bus
from agency.projections.catalog import ALL
from agency.projections.group import ProjectionGroup
from agency.projections.projection import Projection

log = structlog.get_logger(__name__)


async def run_projector(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    projections: tuple[Projection, ...] = ALL,
) -> None:
    async with Bus(nats_url, name="agency-projector") as bus:
        layout = bus.layout
        # The projector sets roles and schemas with `SET LOCAL` only: no session to reset.
        # One transaction at a time for every projection per partition (and one more when a
        # batch is committed projection by projection).
        pool = await create_pool(database_url, max_size=2 + layout.partitions, session_state=False)
        try:
            # On a log of several partitions, a group per partition, each with checkpoints
            # of its own.
            groups = [
                ProjectionGroup(
                    pool,
                    bus.js,
                    projections,
                    dead_letters=bus.dead_letters,
                    layout=layout,
                    partition=p,
                )
                for p in range(layout.partitions)
            ]
            log.info(
                "projector running",
                projections=[p.name for p in projections],
                partitions=layout.partitions,
            )
            async with asyncio.TaskGroup() as tg:
                for group in groups:
                    tg.create_task(group.run(stop))
        finally:
            await asyncio.wait_for(pool.close(), timeout=10)
