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
from collections.abc import Awaitable, Callable, Sequence

import asyncpg
import structlog
from nats.js import JetStreamContext

from contracts.subjects import ALL_EVENTS, EVENTS_STREAM
from infra import db
from infra.db import lock_schema
from infra.jetstream import errors as bus_errors
from infra.jetstream.deadletter import DeadLetter, DeadLetters
from infra.jetstream.reader import Delivered, OrderedReader
from infra.jetstream.records import RecordedEvent, UndecodableEvent
from infra.retry import RetryPolicy, until_stopped
from projections.errors import CommitsLost, ProjectionGap
from projections.projection import Projection
from projections.storable import storable
from projections.tenancy import PROJECTOR, act_as_projector, confine

log = structlog.get_logger(__name__)

LIVE_SCHEMA = "public"
CHECKPOINTS = "public.agency_projection_checkpoints"
# Where a checkpoint's advance is announced (payload `name:stream_seq`), once committed: the
# API wakes the requests waiting to read their writes (services/api/progress.py) instead of
# polling the table.
PROGRESS_CHANNEL = "agency_projection_progress"
# One round of retries; a projection starts another round (logged) while the failure lasts.
# Seconds of a quiet reader after which the runner checks the stream for events it missed.
STALL_CHECK = 10.0
PROJECTION_RETRY = RetryPolicy(attempts=10, timeout=60.0, wait_initial=0.2, wait_max=5.0)


def _transient(exc: BaseException) -> bool:
    return db.is_transient(exc) or bus_errors.is_transient(exc)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def use_schema(conn: asyncpg.Connection, schema: str) -> None:
    """Point unqualified names at `schema` for the rest of the current transaction."""
    await conn.execute(f"SET LOCAL search_path TO {quote_ident(schema)}, public")


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
    gaps = await _advance_positions(conn, projection, events)
    handled = [storable(e) for e in events if projection.wants(e.type)]
    if handled:
        await projection.apply(conn, handled)
    return gaps


async def _advance_positions(
    conn: asyncpg.Connection, projection: Projection, events: Sequence[RecordedEvent]
) -> list[ProjectionGap]:
    first: dict[tuple[str, str, str], int] = {}
    last: dict[tuple[str, str, str], int] = {}
    gaps: list[ProjectionGap] = []
    for e in events:
        env = e.envelope
        key: tuple[str, str, str] = (env.tenant_id, env.aggregate, env.aggregate_id)
        previous = last.get(key)
        if previous is None:
            first[key] = env.seq
        elif env.seq != previous + 1:
            gaps.append(ProjectionGap(projection.name, ".".join(key), previous + 1, env.seq))
        last[key] = env.seq
    table = quote_ident(projection.positions_table)
    rows = await conn.fetch(
        f"SELECT tenant_id, aggregate, aggregate_id, seq FROM {table} "
        "WHERE (tenant_id, aggregate, aggregate_id) IN "
        "(SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))",
        [k[0] for k in first],
        [k[1] for k in first],
        [k[2] for k in first],
    )
    known = {(r["tenant_id"], r["aggregate"], r["aggregate_id"]): r["seq"] for r in rows}
    for key, seq in first.items():
        expected = known.get(key, 0) + 1
        if seq != expected:
            gaps.append(ProjectionGap(projection.name, ".".join(key), expected, seq))
    await conn.execute(
        f"INSERT INTO {table} (tenant_id, aggregate, aggregate_id, seq) "
        "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) "
        "ON CONFLICT (tenant_id, aggregate, aggregate_id) DO UPDATE SET seq = EXCLUDED.seq",
        [k[0] for k in last],
        [k[1] for k in last],
        [k[2] for k in last],
        list(last.values()),
    )
    return gaps


async def announce_progress(conn: asyncpg.Connection, name: str, stream_seq: int) -> None:
    """Tell listeners that `name` has committed up to `stream_seq`.

    Sent after the commit, in a statement of its own: a transaction that notifies takes a
    database-wide lock from before its commit until the commit is on disk, so notifying
    inside each projection's transaction would make the projections' commits wait for one
    another (half the commits per second with 14 writers; a lost announcement is covered
    by the next one, which names a higher sequence). Never fails the commit: a waiter that
    misses it answers at its timeout (202), the projection's work is done."""
    try:
        await conn.execute("SELECT pg_notify($1, $2)", PROGRESS_CHANNEL, f"{name}:{stream_seq}")
    except (asyncpg.PostgresError, *db.TRANSIENT) as e:
        log.warning("projection progress not announced", projection=name, error=str(e))


async def ensure_checkpoint(conn: asyncpg.Connection, name: str) -> int:
    await conn.execute(
        f"INSERT INTO {CHECKPOINTS} (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", name
    )
    seq = await conn.fetchval(f"SELECT stream_seq FROM {CHECKPOINTS} WHERE name = $1", name)
    return int(seq)


class ProjectionRunner:
    """Keeps one projection's live tables up to date with the log."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        js: JetStreamContext,
        projection: Projection,
        *,
        dead_letters: DeadLetters,
        batch: int = 1000,
        filter_subject: str = ALL_EVENTS,
        retry: RetryPolicy = PROJECTION_RETRY,
    ) -> None:
        self._pool = pool
        self._js = js
        self.projection = projection
        self._dead_letters = dead_letters
        self._batch = batch
        self._filter = filter_subject
        self._retry = retry
        self.position = 0
        self.caught_up = asyncio.Event()
        self._advanced = asyncio.Event()

    async def wait_until(self, stream_seq: int, timeout: float) -> None:
        """Return once the checkpoint covers `stream_seq`; TimeoutError after `timeout`."""
        async with asyncio.timeout(timeout):
            while self.position < stream_seq:
                self._advanced.clear()
                await self._advanced.wait()

    def _moved_to(self, stream_seq: int) -> None:
        self.position = max(self.position, stream_seq)
        self._advanced.set()

    async def run(self, stop: asyncio.Event) -> None:
        if not await self._until(stop, self._prepare):
            return
        log.info("projection started", projection=self.projection.name, from_seq=self.position + 1)
        while not stop.is_set():
            try:
                await self._follow(stop)  # returns on stop, or when its reader stalled
            except CommitsLost as e:
                log.error("projection reads the log again", projection=e.projection, error=str(e))
                self.position = e.checkpoint

    async def _follow(self, stop: asyncio.Event) -> None:
        """Apply the log from `position` on until `stop`, or until the reader stalls: quiet
        for `STALL_CHECK` seconds while the stream holds events past `position` (an ordered
        consumer the client failed to recreate after a broker restart)."""
        reader = OrderedReader(
            self._js, self._filter, start_seq=self.position + 1, batch=self._batch
        )
        if not await self._until(stop, reader.open):
            return
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        try:
            while not stop.is_set():
                batch = await reader.next_batch(timeout=0.5)
                if not batch:
                    self.caught_up.set()
                    if loop.time() - quiet_since >= STALL_CHECK:
                        quiet_since = loop.time()
                        if await self._behind():
                            log.warning(
                                "projection reader stalled; opening it again",
                                projection=self.projection.name,
                                position=self.position,
                            )
                            return
                    continue
                quiet_since = loop.time()
                self.caught_up.clear()
                if not await self._commit_resilient(batch, stop):
                    return
        finally:
            await reader.close()

    async def _behind(self) -> bool:
        """Whether the events stream holds events past `position` (False if unknown)."""
        try:
            info = await self._js.stream_info(EVENTS_STREAM)
        except Exception as e:
            if not bus_errors.is_transient(e):
                raise
            return False
        return int(info.state.last_seq) > self.position

    async def _prepare(self) -> None:
        async with self._pool.acquire() as conn:
            await ensure_tables(conn, self.projection, LIVE_SCHEMA)
            self.position = await ensure_checkpoint(conn, self.projection.name)

    async def _until(self, stop: asyncio.Event, operation: Callable[[], Awaitable[None]]) -> bool:
        """Run `operation`, retrying transient database and broker failures round after
        round of the retry policy; False when `stop` came first.

        A projection never passes an event because the database or the broker was away:
        only an error of the event's own (a handler's SQL failing on it) makes it poison.
        """
        while not stop.is_set():
            try:
                done = await until_stopped(stop, self._retried(operation))
            except Exception as e:
                if not _transient(e):
                    raise
                log.error(
                    "projection waits for the database or the broker",
                    projection=self.projection.name,
                    error=f"{type(e).__name__}: {e}",
                )
                continue
            return done is not None
        return False

    async def _retried(self, operation: Callable[[], Awaitable[None]]) -> bool:
        await self._retry.call(_transient, operation)
        return True

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
        name = self.projection.name
        assert isinstance(item, RecordedEvent)
        letter = DeadLetter(
            source_stream=EVENTS_STREAM,
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
                    await announce_progress(conn, name, int(seq))

        if not await self._until(stop, lambda: self._dead_letters.put(letter)):
            return False
        if not await self._until(stop, mark_skipped):
            return False
        self._moved_to(item.stream_seq)
        return True

    async def commit(self, batch: Sequence[Delivered]) -> None:
        """Apply one delivered batch and move the checkpoint, in one transaction."""
        name = self.projection.name
        for item in batch:
            if isinstance(item, UndecodableEvent):
                await self._dead_letters.put(
                    DeadLetter(
                        source_stream=EVENTS_STREAM,
                        subject=item.subject,
                        stream_seq=item.stream_seq,
                        reason="undecodable",
                        detail=item.reason,
                        data=item.data,
                        consumer=f"projection-{name}",
                    )
                )
        async with self._pool.acquire() as conn:
            last_seq = await self._apply(conn, batch)
            await announce_progress(conn, name, last_seq)
        self._moved_to(last_seq)

    async def _apply(self, conn: asyncpg.Connection, batch: Sequence[Delivered]) -> int:
        """The transaction of `commit`; returns the stream sequence the checkpoint is at."""
        name = self.projection.name
        async with conn.transaction():
            await act_as_projector(conn)
            checkpoint = await conn.fetchval(
                f"SELECT stream_seq FROM {CHECKPOINTS} WHERE name = $1 FOR UPDATE", name
            )
            if checkpoint < self.position:
                raise CommitsLost(name, checkpoint, self.position)
            fresh = [e for e in batch if isinstance(e, RecordedEvent) and e.stream_seq > checkpoint]
            last_seq = max(batch[-1].stream_seq, checkpoint)
            gaps: list[ProjectionGap] = []
            if fresh:
                await use_schema(conn, LIVE_SCHEMA)
                gaps = await apply_batch(conn, self.projection, fresh)
            status, error = ("gap", str(gaps[0])) if gaps else ("running", None)
            if gaps:
                for gap in gaps:
                    log.error("projection gap", projection=name, error=str(gap))
                await conn.execute(
                    f"UPDATE {CHECKPOINTS} SET stream_seq = $2, updated_at = now(), "
                    "status = $3, error = $4 WHERE name = $1",
                    name,
                    last_seq,
                    status,
                    error,
                )
            else:
                await conn.execute(
                    f"UPDATE {CHECKPOINTS} SET stream_seq = $2, updated_at = now() WHERE name = $1",
                    name,
                    last_seq,
                )
        return int(last_seq)
