"""Rebuilding a projection from sequence 1 while the live one keeps serving.

The rebuild writes a shadow copy of the projection's tables in a schema of its own, then,
holding the live checkpoint row (which pauses the live runner's commits), catches the
shadow up to the live checkpoint and swaps the tables in. Readers see the old rows until
the swap commits and the rebuilt rows after it, never a half-built read model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from nats.js import JetStreamContext

from agency.contracts.subjects import ALL_EVENTS, EVENTS_STREAM
from agency.infra.jetstream.reader import OrderedReader
from agency.infra.jetstream.records import RecordedEvent
from agency.projections.engine import (
    CHECKPOINTS,
    LIVE_SCHEMA,
    announce_progress,
    apply_batch,
    ensure_checkpoint,
    ensure_tables,
    use_schema,
)
from agency.projections.errors import ProjectionError
from agency.projections.positions import quote_ident
from agency.projections.projection import Projection

Progress = Callable[[int, int], None]

# Every stream sequence up to the target exists (the stream denies deletes), so a long
# silence means the server is unreachable, not that the log ended early.
_MAX_IDLE_FETCHES = 15


class RebuildStalled(ProjectionError):
    def __init__(self, projection: str, position: int, target: int) -> None:
        super().__init__(
            f"rebuild of {projection} stalled at stream seq {position} of {target}: "
            "no events arrived for 15 s; is NATS reachable?"
        )


@dataclass(frozen=True, slots=True)
class RebuildResult:
    projection: str
    schema: str
    applied_upto: int
    swapped: bool


async def last_stream_seq(js: JetStreamContext) -> int:
    info = await js.stream_info(EVENTS_STREAM)
    return int(info.state.last_seq)


async def _fill(
    conn: asyncpg.Connection,
    js: JetStreamContext,
    projection: Projection,
    schema: str,
    *,
    start_seq: int,
    until_seq: int,
    until_time: datetime | None = None,
    progress: Progress | None = None,
    batch: int = 1000,
) -> int:
    """Apply events start_seq..until_seq into `schema`; returns the last sequence covered."""
    position = start_seq - 1
    if position >= until_seq:
        return position
    idle = 0
    async with OrderedReader(js, ALL_EVENTS, start_seq=start_seq, batch=batch) as reader:
        while position < until_seq:
            delivered = await reader.next_batch(timeout=1.0)
            if not delivered:
                idle += 1
                if idle >= _MAX_IDLE_FETCHES:
                    raise RebuildStalled(projection.name, position, until_seq)
                continue
            idle = 0
            events = [
                e
                for e in delivered
                if isinstance(e, RecordedEvent)
                and e.stream_seq <= until_seq
                and (until_time is None or e.envelope.ts <= until_time)
            ]
            async with conn.transaction():
                await use_schema(conn, schema)
                if events:
                    await apply_batch(conn, projection, events)
            position = min(delivered[-1].stream_seq, until_seq)
            if progress:
                progress(position, until_seq)
    return until_seq


async def rebuild(
    pool: asyncpg.Pool,
    js: JetStreamContext,
    projection: Projection,
    *,
    progress: Progress | None = None,
) -> RebuildResult:
    """Drop and rebuild the live tables of `projection` from the start of the log."""
    shadow = f"agency_rebuild_{projection.name}"
    async with pool.acquire() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(shadow)} CASCADE")
        await ensure_tables(conn, projection, shadow)
        await ensure_checkpoint(conn, projection.name)
        target = await last_stream_seq(js)
        built = await _fill(
            conn, js, projection, shadow, start_seq=1, until_seq=target, progress=progress
        )
        async with conn.transaction():
            live = await conn.fetchval(
                f"SELECT stream_seq FROM {CHECKPOINTS} WHERE name = $1 FOR UPDATE",
                projection.name,
            )
            # The live runner is paused on the row lock; bring the shadow level with it.
            built = await _fill(
                conn, js, projection, shadow, start_seq=built + 1, until_seq=max(live, built)
            )
            for table in projection.all_tables:
                await conn.execute(
                    f"DROP TABLE IF EXISTS {quote_ident(LIVE_SCHEMA)}.{quote_ident(table)} CASCADE"
                )
                await conn.execute(
                    f"ALTER TABLE {quote_ident(shadow)}.{quote_ident(table)} "
                    f"SET SCHEMA {quote_ident(LIVE_SCHEMA)}"
                )
            await conn.execute(f"DROP SCHEMA {quote_ident(shadow)} CASCADE")
            await conn.execute(
                f"UPDATE {CHECKPOINTS} SET stream_seq = $2, updated_at = now(), "
                "status = 'running', error = NULL WHERE name = $1",
                projection.name,
                built,
            )
        await announce_progress(conn, [(projection.name, built)])
    return RebuildResult(projection.name, LIVE_SCHEMA, built, swapped=True)


async def build_scratch(
    pool: asyncpg.Pool,
    js: JetStreamContext,
    projection: Projection,
    schema: str,
    *,
    until_seq: int | None = None,
    until_time: datetime | None = None,
    progress: Progress | None = None,
) -> RebuildResult:
    """Build `projection` into `schema` as the log stood at a sequence or a time."""
    async with pool.acquire() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
        await ensure_tables(conn, projection, schema)
        target = until_seq if until_seq is not None else await last_stream_seq(js)
        built = await _fill(
            conn,
            js,
            projection,
            schema,
            start_seq=1,
            until_seq=target,
            until_time=until_time,
            progress=progress,
        )
    return RebuildResult(projection.name, schema, built, swapped=False)
