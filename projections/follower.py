"""Following the events log from a checkpoint: the loop every projection runner shares.

A follower reads the log from `position + 1` with an ordered reader and hands each batch to
`_commit_resilient`; it opens the reader again when it stalls, and starts again from the
database's checkpoint when the database lost commits it had acknowledged. What a batch does
(one projection's tables, or every projection's at once) is the subclass's.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence

import asyncpg
import structlog
from nats.js import JetStreamContext

from agency.contracts.subjects import ALL_EVENTS, EVENTS_STREAM
from agency.infra.jetstream import errors as bus_errors
from agency.infra.jetstream.reader import Delivered, OrderedReader
from agency.infra.outage import is_outage
from agency.infra.retry import RetryPolicy, until_stopped
from agency.projections.errors import CommitsLost

log = structlog.get_logger(__name__)

# Seconds of a quiet reader after which the runner checks the stream for events it missed,
# and the database for commits it lost.
STALL_CHECK = 10.0
CHECKPOINTS = "public.agency_projection_checkpoints"
# One round of retries; a projection starts another round (logged) while the failure lasts.
PROJECTION_RETRY = RetryPolicy(attempts=10, timeout=60.0, wait_initial=0.2, wait_max=5.0)


def transient(exc: BaseException) -> bool:
    return is_outage(exc)


class LogFollower(ABC):
    """Applies the log from `position` on; subclasses say how a batch is committed."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        js: JetStreamContext,
        name: str,
        *,
        batch: int = 1000,
        filter_subject: str = ALL_EVENTS,
        retry: RetryPolicy = PROJECTION_RETRY,
        stream: str = EVENTS_STREAM,
    ) -> None:
        """`stream`/`filter_subject`: the partition of the log it follows (the one stream
        of an unpartitioned log by default)."""
        self._stream = stream
        self._pool = pool
        self._js = js
        self.name = name
        self._batch = batch
        self._filter = filter_subject
        self._retry = retry
        self.position = 0
        self.caught_up = asyncio.Event()
        self._advanced = asyncio.Event()

    @abstractmethod
    async def _prepare(self) -> None:
        """Tables and checkpoints ready; `position` read."""

    @abstractmethod
    def _committed(self) -> dict[str, int]:
        """The stream sequence each projection committed here, by projection name."""

    @abstractmethod
    async def _commit_resilient(self, batch: Sequence[Delivered], stop: asyncio.Event) -> bool:
        """Commit a batch whatever it holds; False when `stop` came first."""

    def _restart_after(self, lost: CommitsLost) -> None:
        """Where to read again from once the database lost commits."""
        self.position = lost.checkpoint

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
        log.info("projection started", projection=self.name, from_seq=self.position + 1)
        while not stop.is_set():
            try:
                await self._follow(stop)  # returns on stop, or when its reader stalled
            except CommitsLost as e:
                log.error("projection reads the log again", projection=e.projection, error=str(e))
                self._restart_after(e)

    async def _follow(self, stop: asyncio.Event) -> None:
        """Apply the log from `position` on until `stop`, or until the reader stalls: quiet
        for `STALL_CHECK` seconds while the stream holds events past `position` (an ordered
        consumer the client failed to recreate after a broker restart)."""
        reader = OrderedReader(
            self._js,
            self._filter,
            start_seq=self.position + 1,
            batch=self._batch,
            stream=self._stream,
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
                        await self._check_kept()
                        if await self._behind():
                            log.warning(
                                "projection reader stalled; opening it again",
                                projection=self.name,
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

    async def _check_kept(self) -> None:
        """Raises `CommitsLost` when a checkpoint in the database is behind what was
        committed here (a database that lost commits it had acknowledged). The next batch's
        commit finds that too, but a quiet log sends none: without this look, the read
        models would stay behind until the next event. Unknown (the database away): passed."""
        committed = self._committed()
        try:
            async with self._pool.acquire() as conn:
                rows = await conn.fetch(
                    f"SELECT name, stream_seq FROM {CHECKPOINTS} WHERE name = ANY($1)",
                    list(committed),
                )
        except Exception as e:
            if not transient(e):
                raise
            return
        lost = [
            CommitsLost(r["name"], int(r["stream_seq"]), committed[r["name"]])
            for r in rows
            if int(r["stream_seq"]) < committed[r["name"]]
        ]
        for each in lost[1:]:
            self._restart_after(each)
        if lost:
            raise lost[0]

    async def _behind(self) -> bool:
        """Whether the events stream holds events past `position` (False if unknown)."""
        try:
            info = await self._js.stream_info(self._stream)
        except Exception as e:
            if not bus_errors.is_transient(e):
                raise
            return False
        return int(info.state.last_seq) > self.position

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
                if not transient(e):
                    raise
                log.error(
                    "projection waits for the database or the broker",
                    projection=self.name,
                    error=f"{type(e).__name__}: {e}",
                )
                continue
            return done is not None
        return False

    async def _retried(self, operation: Callable[[], Awaitable[None]]) -> bool:
        await self._retry.call(transient, operation)
        return True
