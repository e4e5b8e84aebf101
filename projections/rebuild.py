"""Rebuilding a projection from sequence 1 while the live one keeps serving.

The rebuild writes a shadow copy of the projection's tables in a schema of its own, then,
holding the live checkpoint row (which pauses the live runner's commits), catches the
shadow up to the live checkpoint and swaps the tables in. Readers see the old rows until
the swap commits and the rebuilt rows after it, never a half-built read model.

On a log of several partitions, the shadow is filled from every partition's stream, and
the swap holds every partition's checkpoint row of the projection (`checkpoint_name`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from nats.js import JetStreamContext

from agency.contracts.partitions import EventLayout, checkpoint_name
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
    projection: str
    position: int
    target: int
    message = (
        "rebuild of {projection} stalled at stream seq {position} of {target}: "
        "no events arrived for 15 s; is NATS reachable?"
    )


@dataclass(frozen=True, slots=True)
class RebuildResult:
    projection: str
    schema: str
    applied_upto: int
    swapped: bool


async def last_stream_seq(js: JetStreamContext, stream: str = EVENTS_STREAM) -> int:
    info = await js.stream_info(stream)
    return int(info.state.last_seq)


async def last_stream_seqs(js: JetStreamContext, layout: EventLayout) -> dict[int, int]:
    """Each partition's last stream sequence."""
    return {p: await last_stream_seq(js, layout.stream(p)) for p in range(layout.partitions)}


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
    layout: EventLayout | None = None,
    partition: int = 0,
) -> int:
    """Apply events start_seq..until_seq (of `partition`'s stream) into `schema`; returns
    the last sequence covered."""
    layout = layout or EventLayout()
    position = start_seq - 1
    if position >= until_seq:
        return position
    idle = 0
    reader = OrderedReader(
        js,
        layout.all_events(partition) if layout.partitioned else ALL_EVENTS,
        start_seq=start_seq,
        batch=batch,
        stream=layout.stream(partition),
    )
    async with reader:
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
    layout: EventLayout | None = None,
) -> RebuildResult:
    """Drop and rebuild the live tables of `projection` from the start of the log."""
    layout = layout or EventLayout()
    partitions = range(layout.partitions)
    names = {p: checkpoint_name(projection.name, p) for p in partitions}
    shadow = f"agency_rebuild_{projection.name}"
    async with pool.acquire() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(shadow)} CASCADE")
        await ensure_tables(conn, projection, shadow)
        built: dict[int, int] = {}
        for p in partitions:
            await ensure_checkpoint(conn, names[p])
            target = await last_stream_seq(js, layout.stream(p))
            built[p] = await _fill(
                conn, js, projection, shadow, start_seq=1, until_seq=target,
                progress=progress, layout=layout, partition=p,
            )  # fmt: skip
        async with conn.transaction():
            rows = await conn.fetch(
                f"SELECT name, stream_seq FROM {CHECKPOINTS} WHERE name = ANY($1) "
                "ORDER BY name FOR UPDATE",
                list(names.values()),
            )
            live = {r["name"]: int(r["stream_seq"]) for r in rows}
            # The live runners are paused on the row locks; bring the shadow level with them.
            for p in partitions:
                built[p] = await _fill(
                    conn, js, projection, shadow, start_seq=built[p] + 1,
                    until_seq=max(live[names[p]], built[p]), layout=layout, partition=p,
                )  # fmt: skip
            for table in projection.all_tables:
                await conn.execute(
                    f"DROP TABLE IF EXISTS {quote_ident(LIVE_SCHEMA)}.{quote_ident(table)} CASCADE"
                )
                await conn.execute(
                    f"ALTER TABLE {quote_ident(shadow)}.{quote_ident(table)} "
                    f"SET SCHEMA {quote_ident(LIVE_SCHEMA)}"
                )
            await conn.execute(f"DROP SCHEMA {quote_ident(shadow)} CASCADE")
            for p in partitions:
                await conn.execute(
                    f"UPDATE {CHECKPOINTS} SET stream_seq = $2, updated_at = now(), "
                    "status = 'running', error = NULL WHERE name = $1",
                    names[p],
                    built[p],
                )
        await announce_progress(conn, [(names[p], built[p]) for p in partitions])
    return RebuildResult(projection.name, LIVE_SCHEMA, built[0], swapped=True)


async def build_scratch(
    pool: asyncpg.Pool,
    js: JetStreamContext,
    projection: Projection,
    schema: str,
    *,
    until_seq: int | Mapping[int, int] | None = None,
    until_time: datetime | None = None,
    progress: Progress | None = None,
    layout: EventLayout | None = None,
) -> RebuildResult:
    """Build `projection` into `schema` as the log stood at a sequence (per partition,
    on a log of several) or a time."""
    layout = layout or EventLayout()
    if isinstance(until_seq, int):
        until_seq = {0: until_seq}
    built: dict[int, int] = {}
    async with pool.acquire() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
        await ensure_tables(conn, projection, schema)
        for p in range(layout.partitions):
            target = (
                until_seq[p]
                if until_seq is not None
                else await last_stream_seq(js, layout.stream(p))
            )
            built[p] = await _fill(
                conn,
                js,
                projection,
                schema,
                start_seq=1,
                until_seq=target,
                until_time=until_time,
                progress=progress,
                layout=layout,
                partition=p,
            )
    return RebuildResult(projection.name, schema, built[0], swapped=False)
