"""Running projections: batches of events applied with their checkpoint in one transaction.

Every runner of a projection locks its checkpoint row, skips what the checkpoint already
covers and applies the rest, so an event is applied once even with redelivery, several
runners, or a rebuild swapping tables underneath.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import structlog
from nats.js import JetStreamContext

from contracts.subjects import ALL_EVENTS, EVENTS_STREAM
from infra.jetstream.deadletter import DeadLetter, DeadLetters
from infra.jetstream.reader import Delivered, OrderedReader
from infra.jetstream.records import RecordedEvent, UndecodableEvent
from projections.errors import ProjectionGap
from projections.projection import Projection

log = structlog.get_logger(__name__)

LIVE_SCHEMA = "public"
TRANSIENT_DB_ERRORS = (
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    OSError,
)
CHECKPOINTS = "public.agency_projection_checkpoints"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def use_schema(conn: asyncpg.Connection, schema: str) -> None:
    """Point unqualified names at `schema` for the rest of the current transaction."""
    await conn.execute(f"SET LOCAL search_path TO {quote_ident(schema)}, public")


async def ensure_tables(conn: asyncpg.Connection, projection: Projection, schema: str) -> None:
    async with conn.transaction():
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(schema)}")
        await use_schema(conn, schema)
        await conn.execute(projection.ddl)
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {quote_ident(projection.positions_table)} ("
            " tenant_id text NOT NULL, aggregate text NOT NULL, aggregate_id text NOT NULL,"
            " seq bigint NOT NULL, PRIMARY KEY (tenant_id, aggregate, aggregate_id))"
        )


async def apply_batch(
    conn: asyncpg.Connection, projection: Projection, events: Sequence[RecordedEvent]
) -> list[ProjectionGap]:
    """Apply events inside the caller's transaction (search_path already set).

    Returns the gaps found; they are reported, not fatal: the events around a gap are real
    and the read model is still the best view of the log there is.
    """
    gaps = await _advance_positions(conn, projection, events)
    handled = [e for e in events if projection.wants(e.type)]
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
    ) -> None:
        self._pool = pool
        self._js = js
        self.projection = projection
        self._dead_letters = dead_letters
        self._batch = batch
        self._filter = filter_subject
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
        async with self._pool.acquire() as conn:
            await ensure_tables(conn, self.projection, LIVE_SCHEMA)
            self.position = await ensure_checkpoint(conn, self.projection.name)
        log.info("projection started", projection=self.projection.name, from_seq=self.position + 1)
        async with OrderedReader(
            self._js, self._filter, start_seq=self.position + 1, batch=self._batch
        ) as reader:
            while not stop.is_set():
                batch = await reader.next_batch(timeout=0.5)
                if not batch:
                    self.caught_up.set()
                    continue
                self.caught_up.clear()
                await self._commit_resilient(batch)

    async def _commit_resilient(self, batch: Sequence[Delivered]) -> None:
        """Commit a batch; an event its handler cannot apply is dead-lettered and passed.

        Lost connections are retried (the same batch again is harmless: the checkpoint
        filters it); a handler error is pinned to its event by committing one at a time.
        """
        delay = 0.2
        while True:
            try:
                await self.commit(batch)
                return
            except TRANSIENT_DB_ERRORS as e:
                log.warning("projection commit failed, retrying", error=str(e), delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except asyncpg.PostgresError:
                if len(batch) > 1:
                    for item in batch:
                        await self._commit_resilient([item])
                    return
                await self._skip_poison(batch[0])
                return

    async def _skip_poison(self, item: Delivered) -> None:
        name = self.projection.name
        assert isinstance(item, RecordedEvent)
        try:
            await self.commit([item])
        except asyncpg.PostgresError as e:
            await self._dead_letters.put(
                DeadLetter(
                    source_stream=EVENTS_STREAM,
                    subject=item.subject,
                    stream_seq=item.stream_seq,
                    reason="projection_failed",
                    detail=f"{name}: {type(e).__name__}: {e}",
                    data=item.raw,
                    consumer=f"projection-{name}",
                )
            )
            async with self._pool.acquire() as conn:
                await conn.execute(
                    f"UPDATE {CHECKPOINTS} SET stream_seq = GREATEST(stream_seq, $2), "
                    "updated_at = now(), status = 'skipped', error = $3 WHERE name = $1",
                    name,
                    item.stream_seq,
                    f"event at stream seq {item.stream_seq} dead-lettered: {e}",
                )
            self._moved_to(item.stream_seq)

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
        async with self._pool.acquire() as conn, conn.transaction():
            checkpoint = await conn.fetchval(
                f"SELECT stream_seq FROM {CHECKPOINTS} WHERE name = $1 FOR UPDATE", name
            )
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
        self._moved_to(last_seq)
