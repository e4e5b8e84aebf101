"""Running projections: batches of events applied with their checkpoint in one transaction.

Every runner of a projection locks its checkpoint row, skips what the checkpoint already
covers and applies the rest, so an event is applied once even with redelivery, several
runners, or a rebuild swapping tables underneath. A checkpoint found behind what the runner
itself committed means the database lost acknowledged commits (a crash without synchronous
commit, a failover to a replica that lagged): the runner reads the log again from the
checkpoint, so the lost events are applied, not skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import structlog
from nats.js import JetStreamContext

from agency.contracts.partitions import EventLayout, checkpoint_name
from agency.infra import db
from agency.infra.db import lock_schema
from agency.infra.jetstream.deadletter import DeadLetter, DeadLetters
from agency.infra.jetstream.reader import Delivered
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent
from agency.projections.erasure import erase_threads, tombstones
from agency.projections.errors import CommitsLost, ProjectionGap
from agency.projections.follower import (
    CHECKPOINTS as CHECKPOINTS,  # the table's name, also here
    LogFollower,
)
from agency.projections.positions import advance_positions, quote_ident
from agency.projections.projection import Projection
from agency.projections.storable import storable
from agency.projections.tenancy import AS_PROJECTOR, PROJECTOR, confine

log = structlog.get_logger(__name__)

LIVE_SCHEMA = "public"
# Where a checkpoint's advance is announced (payload `name:stream_seq`), once committed: the
# API wakes the requests waiting to read their writes (services/api/progress.py) instead of
# polling the table.
PROGRESS_CHANNEL = "agency_projection_progress"


def schema_path(schema: str) -> str:
    """The statement pointing unqualified names at `schema` for the rest of the current
    transaction."""
    return f"SET LOCAL search_path TO {quote_ident(schema)}, public"


async def use_schema(conn: asyncpg.Connection, schema: str) -> None:
    """Point unqualified names at `schema` for the rest of the current transaction."""
    await conn.execute(schema_path(schema))


async def ensure_tables(conn: asyncpg.Connection, projection: Projection, schema: str) -> None:
    async with conn.transaction():
        await lock_schema(conn)
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        await use_schema(conn, schema)
        await conn.execute(projection.ddl)
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quote_ident(projection.positions_table)} ("
            " tenant_id text NOT NULL, aggregate text NOT NULL, aggregate_id text NOT NULL,"
            " seq bigint NOT NULL, PRIMARY KEY (tenant_id, aggregate, aggregate_id))"
        )
        # Tenant requests read these tables confined to their tenant (projections/tenancy.py).
        await confine(conn, schema, (*projection.tables, projection.positions_table))
        await conn.execute(f"GRANT SELECT, UPDATE ON {CHECKPOINTS} TO {PROJECTOR}")


async def apply_batch(
    conn: asyncpg.Connection, projection: Projection, events: Sequence[RecordedEvent]
) -> list[ProjectionGap]:
    """Apply events inside the caller's transaction (search_path already set).

    Returns the gaps found; they are reported, not fatal: the events around a gap are real
    and the read model is still the best view of the log there is.
    """
    gaps = (await advance_positions(conn, [projection], events))[projection.name]
    await apply_events(conn, projection, events)
    return gaps


async def apply_events(
    conn: asyncpg.Connection, projection: Projection, events: Sequence[RecordedEvent]
) -> None:
    """The projection's handlers for what it wants of `events` (positions moved apart)."""
    handled = [storable(e) for e in events if projection.wants(e.type)]
    if handled:
        await projection.apply(conn, handled)
    deleted = tombstones(events)
    if deleted:
        await erase_threads(conn, projection, deleted)


async def announce_progress(conn: asyncpg.Connection, moved: Sequence[tuple[str, int]]) -> None:
    """Tell listeners that each projection named has committed up to its stream sequence
    (one notification each, sent in one statement).

    Sent after the commit, in a statement of its own: a transaction that notifies takes a
    database-wide lock from before its commit until the commit is on disk, so notifying
    inside each projection's transaction would make the projections' commits wait for one
    another (half the commits per second with 14 writers; a lost announcement is covered
    by the next one, which names a higher sequence). Never fails the commit: a waiter that
    misses it answers at its timeout (202), the projection's work is done."""
    try:
        await conn.execute(
            "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p",
            PROGRESS_CHANNEL,
            [f"{name}:{seq}" for name, seq in moved],
        )
    except (asyncpg.PostgresError, *db.TRANSIENT) as e:
        names = [name for name, _ in moved]
        log.warning("projection progress not announced", projections=names, error=str(e))


async def ensure_checkpoint(conn: asyncpg.Connection, name: str) -> int:
    await conn.execute(
        f"INSERT INTO {CHECKPOINTS} (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", name
    )
    seq = await conn.fetchval(f"SELECT stream_seq FROM {CHECKPOINTS} WHERE name = $1", name)
    return int(seq)


class ProjectionRunner(LogFollower):
    """Keeps one projection's live tables up to date with the log."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        js: JetStreamContext,
        projection: Projection,
        *,
        dead_letters: DeadLetters,
        batch: int = 1000,
        layout: EventLayout | None = None,
        partition: int = 0,
    ) -> None:
        """`layout`, `partition`: on a log of several partitions, the one it follows, with
        a checkpoint of its own (`checkpoint_name`)."""
        layout = layout or EventLayout()
        self.checkpoint = checkpoint_name(projection.name, partition)
        super().__init__(
            pool,
            js,
            self.checkpoint,
            batch=batch,
            stream=layout.stream(partition),
            filter_subject=layout.all_events(partition),
        )
        self.projection = projection
        self._dead_letters = dead_letters

    async def _prepare(self) -> None:
        async with self._pool.acquire() as conn:
            await ensure_tables(conn, self.projection, LIVE_SCHEMA)
            self.position = await ensure_checkpoint(conn, self.checkpoint)

    def _committed(self) -> dict[str, int]:
        return {self.checkpoint: self.position}

    async def _commit_resilient(self, batch: Sequence[Delivered], stop: asyncio.Event) -> bool:
        """Commit a batch; an event its handler cannot apply is dead-lettered and passed.

        Transient failures are retried (the same batch again is harmless: the checkpoint
        filters it); a handler error is pinned to its event by committing one at a time.
        False when `stop` came first.
        """
        try:
            return await self._until(stop, lambda: self.commit(batch))
        except asyncpg.PostgresError as e:
            if len(batch) > 1:
                for item in batch:
                    if not await self._commit_resilient([item], stop):
                        return False
                return True
            return await self._skip_poison(batch[0], e, stop)

    async def _skip_poison(self, item: Delivered, error: Exception, stop: asyncio.Event) -> bool:
        name = self.checkpoint
        assert isinstance(item, RecordedEvent)
        letter = DeadLetter(
            source_stream=self._stream,
            subject=item.subject,
            stream_seq=item.stream_seq,
            reason="projection_failed",
            detail=f"{name}: {type(error).__name__}: {error}",
            data=item.raw,
            consumer=f"projection-{name}",
        )

        async def mark_skipped() -> None:
            async with self._pool.acquire() as conn:
                seq = await conn.fetchval(
                    f"UPDATE {CHECKPOINTS} SET stream_seq = GREATEST(stream_seq, $2), "
                    "updated_at = now(), status = 'skipped', error = $3 WHERE name = $1 "
                    "RETURNING stream_seq",
                    name,
                    item.stream_seq,
                    f"event at stream seq {item.stream_seq} dead-lettered: {error}",
                )
                if seq is not None:
                    await announce_progress(conn, [(name, int(seq))])

        if not await self._until(stop, lambda: self._dead_letters.put(letter)):
            return False
        if not await self._until(stop, mark_skipped):
            return False
        self._moved_to(item.stream_seq)
        return True

    async def commit(self, batch: Sequence[Delivered]) -> None:
        """Apply one delivered batch and move the checkpoint, in one transaction."""
        name = self.checkpoint
        await self.letter_undecodable(batch)
        async with self._pool.acquire() as conn:
            async with conn.transaction():
                # The projector's role and the live schema, for this transaction: one trip.
                await conn.execute(f"{AS_PROJECTOR}; {schema_path(LIVE_SCHEMA)}")
                checkpoint = await conn.fetchval(
                    f"SELECT stream_seq FROM {CHECKPOINTS} WHERE name = $1 FOR UPDATE", name
                )
                moved = await self.apply_fresh(conn, checkpoint, batch)
                await move_checkpoints(conn, [moved])
            await announce_progress(conn, [(name, moved.stream_seq)])
        self._moved_to(moved.stream_seq)

    async def letter_undecodable(self, batch: Sequence[Delivered]) -> None:
        """Dead-letter what in the batch is no event (it is passed, never applied)."""
        for item in batch:
            # A deleted thread's events are erased, not faulty: nothing to look into.
            if isinstance(item, UndecodableEvent) and not item.erased:
                await self._dead_letters.put(
                    DeadLetter(
                        source_stream=self._stream,
                        subject=item.subject,
                        stream_seq=item.stream_seq,
                        reason="undecodable",
                        detail=item.reason,
                        data=item.data,
                        consumer=f"projection-{self.projection.name}",
                    )
                )

    async def apply_fresh(
        self, conn: asyncpg.Connection, checkpoint: int, batch: Sequence[Delivered]
    ) -> Moved:
        """Inside the caller's transaction (checkpoint row locked, role and schema set):
        apply what the checkpoint does not cover yet; where the checkpoint goes."""
        self.check_kept(checkpoint)
        fresh = past(checkpoint, batch)
        gaps = await apply_batch(conn, self.projection, fresh) if fresh else []
        return self.moved(checkpoint, batch, gaps)

    def check_kept(self, checkpoint: int) -> None:
        """Raises `CommitsLost` when the checkpoint (its row locked by the caller) is behind
        what this runner committed."""
        if checkpoint < self.position:
            raise CommitsLost(self.checkpoint, checkpoint, self.position)

    def moved(
        self, checkpoint: int, batch: Sequence[Delivered], gaps: Sequence[ProjectionGap]
    ) -> Moved:
        """Where the checkpoint goes once the batch is applied; the gaps found are logged."""
        name = self.checkpoint
        for gap in gaps:
            log.error("projection gap", projection=name, error=str(gap))
        return Moved(
            name=name,
            stream_seq=max(batch[-1].stream_seq, checkpoint),
            gap=str(gaps[0]) if gaps else None,
        )


def past(checkpoint: int, batch: Sequence[Delivered]) -> list[RecordedEvent]:
    """The events of the batch past `checkpoint`."""
    return [e for e in batch if isinstance(e, RecordedEvent) and e.stream_seq > checkpoint]


@dataclass(frozen=True, slots=True)
class Moved:
    """Where a commit moves a projection's checkpoint; `gap` is set when it found one."""

    name: str
    stream_seq: int
    gap: str | None = None


async def move_checkpoints(conn: asyncpg.Connection, moves: Sequence[Moved]) -> None:
    """Move checkpoints in one statement: a gap sets the status `gap` and its error; the
    status is otherwise left as it was."""
    await conn.execute(
        f"UPDATE {CHECKPOINTS} AS c SET stream_seq = m.seq, updated_at = now(), "
        "status = CASE WHEN m.gap IS NULL THEN c.status ELSE 'gap' END, "
        "error = CASE WHEN m.gap IS NULL THEN c.error ELSE m.gap END "
        "FROM unnest($1::text[], $2::bigint[], $3::text[]) AS m(name, seq, gap) "
        "WHERE c.name = m.name",
        [m.name for m in moves],
        [m.stream_seq for m in moves],
        [m.gap for m in moves],
    )
