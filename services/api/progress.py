"""How far each projection has applied the log, as the projector announces it.

The projector sends `name:stream_seq` on `PROGRESS_CHANNEL` in the transaction that moves a
checkpoint (PostgreSQL delivers it at commit). One listening connection per API process
keeps each projection's highest sequence in memory, seeded from the checkpoints table once
it listens, and wakes the requests waiting for a projection to pass an event.

A lost connection is opened again (bounded rounds of the retry policy) and the table read
again; while nothing listens, waiters read the table themselves every `FALLBACK_INTERVAL`,
so a wait never outlasts its timeout because a notification could not arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

import asyncpg
import structlog

from agency.contracts.partitions import checkpoint_name
from agency.infra import db
from agency.infra.retry import RetryPolicy, sleep_until_stopped, until_stopped
from agency.projections.engine import CHECKPOINTS, PROGRESS_CHANNEL

log = structlog.get_logger(__name__)

# Opening the listening connection again; after a spent round, the next starts later.
LISTEN_RETRY = RetryPolicy(attempts=6, timeout=30.0, wait_initial=0.1, wait_max=2.0)
# How often a waiter reads the checkpoints table while no connection listens.
FALLBACK_INTERVAL = 0.2
# How often an idle listening connection is checked (a connection that died silently).
HEALTH_INTERVAL = 10.0
HEALTH_TIMEOUT = 5.0


@dataclass(eq=False, slots=True)
class _Waiter:
    names: tuple[str, ...]
    stream_seq: int
    woken: asyncio.Future[None]

    def wake(self) -> None:
        if not self.woken.done():
            self.woken.set_result(None)


class ProjectionProgress:
    """Each projection's applied stream sequence, kept current by notifications."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        retry: RetryPolicy = LISTEN_RETRY,
        health_interval: float = HEALTH_INTERVAL,
    ) -> None:
        self._pool = pool
        self._retry = retry
        self._health_interval = health_interval
        self._applied: dict[str, int] = {}
        self._waiters: set[_Waiter] = set()
        self._listening = False
        # The backend of the listening connection (None while there is none), for tests
        # and diagnostics.
        self.backend_pid: int | None = None
        self.connections = 0
        # How often a waiter had to read the table itself (nothing listening).
        self.table_reads = 0
        self._on_lost: Callable[[object], None] = lambda _: None

    @property
    def listening(self) -> bool:
        return self._listening

    def applied(self, name: str) -> int:
        return self._applied.get(name, 0)

    async def wait_passed(
        self, names: Iterable[str], stream_seq: int, timeout: float, *, partition: int = 0
    ) -> bool:
        """Whether every projection in `names` has applied `stream_seq` (of `partition`'s
        stream, on a log of several) within `timeout`."""
        names = tuple(checkpoint_name(n, partition) for n in names)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        while True:
            if not self._listening:
                await self._read_table(names, deadline - loop.time())
            if self._passed(names, stream_seq):
                return True
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            wait = remaining if self._listening else min(remaining, FALLBACK_INTERVAL)
            waiter = _Waiter(names, stream_seq, loop.create_future())
            self._waiters.add(waiter)
            try:
                async with asyncio.timeout(wait):
                    await waiter.woken
            except TimeoutError:
                pass
            finally:
                self._waiters.discard(waiter)

    def _passed(self, names: tuple[str, ...], stream_seq: int) -> bool:
        return all(self._applied.get(n, 0) >= stream_seq for n in names)

    @contextlib.asynccontextmanager
    async def listening_while(self) -> AsyncIterator[None]:
        """Listen until the block ends (the app's lifespan)."""
        stop = asyncio.Event()
        task = asyncio.create_task(self._listen(stop), name="projection-progress")
        try:
            yield
        finally:
            stop.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _listen(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            lost = asyncio.Event()
            try:
                conn = await until_stopped(
                    stop, self._retry.call(db.is_transient, self._open, lost)
                )
            except Exception as e:
                log.warning(
                    "projection progress: cannot listen, waits read the table",
                    error=f"{type(e).__name__}: {e}",
                )
                await sleep_until_stopped(stop, self._retry.wait_max)
                continue
            if conn is None:
                return
            try:
                await self._hold(conn, stop, lost)
            except Exception as e:
                log.warning(
                    "projection progress: listening connection lost",
                    error=f"{type(e).__name__}: {e}",
                )
            finally:
                await self._close(conn)

    async def _open(self, lost: asyncio.Event) -> asyncpg.Connection:
        """A connection listening on the channel, the table read after it listens (an
        advance in between is in one or the other), waiters woken to use it."""
        conn: asyncpg.Connection = await self._pool.acquire(timeout=HEALTH_TIMEOUT)
        try:
            conn.add_termination_listener(self._lost_listener(lost))
            await conn.add_listener(PROGRESS_CHANNEL, self._notified)
            rows = await conn.fetch(
                f"SELECT name, stream_seq FROM {CHECKPOINTS}", timeout=HEALTH_TIMEOUT
            )
        except BaseException:
            await self._close(conn)
            raise
        for row in rows:
            self._advance(row["name"], int(row["stream_seq"]))
        self.backend_pid = conn.get_server_pid()
        self.connections += 1
        self._listening = True
        self._wake()
        log.info("projection progress: listening", pid=self.backend_pid)
        return conn

    def _lost_listener(self, lost: asyncio.Event) -> Callable[[object], None]:
        def on_lost(_: object) -> None:
            lost.set()

        self._on_lost = on_lost
        return on_lost

    async def _close(self, conn: asyncpg.Connection) -> None:
        self._listening = False
        self.backend_pid = None
        self._wake()
        with contextlib.suppress(Exception):
            conn.remove_termination_listener(self._on_lost)
            if not conn.is_closed():
                await conn.remove_listener(PROGRESS_CHANNEL, self._notified)
        with contextlib.suppress(Exception):
            await self._pool.release(conn, timeout=HEALTH_TIMEOUT)

    async def _hold(
        self, conn: asyncpg.Connection, stop: asyncio.Event, lost: asyncio.Event
    ) -> None:
        """Until `stop` (returns) or the connection's loss (raises)."""
        while not stop.is_set():
            ended = asyncio.ensure_future(lost.wait())
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait(
                    {ended, stopping},
                    timeout=self._health_interval,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                ended.cancel()
                stopping.cancel()
            if stop.is_set():
                return
            if lost.is_set() or conn.is_closed():
                raise asyncpg.InterfaceError("the listening connection was lost")
            await conn.fetchval("SELECT 1", timeout=HEALTH_TIMEOUT)

    def _notified(self, conn: object, pid: int, channel: str, payload: str) -> None:
        name, _, seq = payload.rpartition(":")
        try:
            self._advance(name, int(seq))
        except ValueError:
            log.warning("projection progress: unreadable notification", payload=payload[:200])
            return
        for waiter in self._waiters:
            if name in waiter.names and self._passed(waiter.names, waiter.stream_seq):
                waiter.wake()

    def _advance(self, name: str, stream_seq: int) -> None:
        if stream_seq > self._applied.get(name, 0):
            self._applied[name] = stream_seq

    def _wake(self) -> None:
        """Every waiter looks again (listening started or stopped)."""
        for waiter in self._waiters:
            waiter.wake()

    async def _read_table(self, names: tuple[str, ...], timeout: float) -> None:
        """The checkpoints as stored, while no notification can arrive (within `timeout`)."""
        self.table_reads += 1
        try:
            async with asyncio.timeout(max(timeout, 0.01)), self._pool.acquire() as conn:
                rows = await conn.fetch(
                    f"SELECT name, stream_seq FROM {CHECKPOINTS} WHERE name = ANY($1)",
                    list(names),
                )
        except Exception as e:
            if not db.is_transient(e):
                raise
            return
        for row in rows:
            self._advance(row["name"], int(row["stream_seq"]))
