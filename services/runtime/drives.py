"""Driving threads in this process: one drive per thread at a time, under the thread's lease.

A drive runs a thread's loop until it waits again (`ThreadDriver.drive_locked`). It holds
the thread's lease throughout, so only one worker makes a thread's model calls; it is
stopped if it appends nothing for the watchdog's `end_after`. Drives start three ways:
- from a trigger event, waiting (bounded) for another worker's lease to be let go;
- eagerly, as soon as a command's decision is being stored, without waiting for the
  trigger to come back through the consumer (the trigger still comes, a no-op then);
- to store a command's decision itself, as the first pending events of its first append
  (`services/runtime/decision.py`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

import structlog

from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.leases import Leases
from agency.infra.tasks import cancel_and_wait
from agency.services.runtime.decision import Decision
from agency.services.runtime.loop import ThreadDriver
from agency.services.runtime.settled import SettledThreads
from agency.services.runtime.watches import lease_key
from agency.services.threads.caches import ThreadCache

log = structlog.get_logger(__name__)

# How long a trigger waits for a busy thread's lease before it is redelivered instead;
# the holder lets go whenever the thread waits, so this is rarely reached.
BUSY_WAIT = 300.0
_BUSY_PAUSE = 0.05
_BUSY_PAUSE_MAX = 1.0
_BUSY_WARN = 30.0
# How long a command whose drive found the thread leased elsewhere waits for the holder
# to move the thread or let go, before it is decided again; and its first pause.
_HOLDER_WAIT = 2.0
_HOLDER_PAUSE = 0.005
# The state a drive begins from once a command's decision is stored (None: read it).
StartState = asyncio.Future[ThreadState | None]


class ThreadBusy(Exception):
    def __init__(self, tenant: str, thread_id: str, seconds: float) -> None:
        super().__init__(
            f"thread {thread_id} of tenant {tenant} stayed leased to another worker for "
            f"{seconds:g} s"
        )


class DriveStalled(Exception):
    """A drive appended nothing for the watchdog's `end_after`: it waits on something that
    will not answer, and must not hold the thread's lease (and its run) any longer."""

    def __init__(self, thread_id: str, seconds: float) -> None:
        super().__init__(
            f"driving thread {thread_id} made no progress for {seconds:g} s; it was stopped"
        )


class Drives:
    """The drives of one runtime worker; those it starts itself end with its task group."""

    def __init__(
        self,
        driver: ThreadDriver,
        threads: ThreadCache,
        leases: Leases,
        *,
        end_after: float,
        busy_wait: float = BUSY_WAIT,
    ) -> None:
        self.driver = driver
        self.leases = leases
        self.settled = SettledThreads()
        self._threads = threads
        self._end_after = end_after
        self._busy_wait = busy_wait
        self._background: asyncio.TaskGroup | None = None
        self._eager: set[asyncio.Task[None]] = set()

    def attach(self, background: asyncio.TaskGroup) -> None:
        """The task group that the drives this worker starts itself run in (and end with)."""
        self._background = background

    def can_start(self, tenant: str, thread_id: str) -> bool:
        """Whether a drive of the thread can start here now: the worker is attached, and
        no drive of the thread runs in this process."""
        return self._background is not None and not self.driver.lock(tenant, thread_id).locked()

    def soon(self, tenant: str, thread_id: str, start: StartState | None = None) -> None:
        """Start driving the thread now, without waiting for the trigger event to come back
        through the consumer: it still comes, and is a no-op or a retry if this fails.
        `start`: the state to drive from once it is known (None in it: load the thread)."""
        self._spawn(self._eager_drive(tenant, thread_id, start))

    def store_decision(
        self,
        tenant: str,
        state: ThreadState,
        decision: Decision,
        checked: asyncio.Future[ThreadState] | None = None,
    ) -> None:
        """Start the drive whose first append stores `decision`; `decision.stored` says
        whether it did. `checked`: the log's state, being read while the drive takes the
        thread's lease; the drive starts from it, and stores the decision only if the log
        is where the decision was made (`Decision.decided_at`). None: start from `state`."""
        self._spawn(self._drive_decision(tenant, state, decision, checked))

    async def owned(
        self,
        tenant: str,
        thread_id: str,
        seen: int = 0,
        *,
        start: StartState | None = None,
        decision: Decision | None = None,
    ) -> bool:
        """Drive the thread while holding its lease: False (having done nothing) while
        another worker holds it. Only the lease holder makes the thread's model calls.
        True without a drive when a drive here already settled the thread past `seen`."""
        async with self.driver.lock(tenant, thread_id):
            if self.settled.covers(tenant, thread_id, seen):
                return True
            state = await self.leases.run_owned(
                lease_key(tenant, thread_id),
                lambda: self._bounded(tenant, thread_id, seen, start, decision),
            )
        if state is None:
            return False
        self.settled.mark(tenant, thread_id, state.position.stream_seq)
        return True

    async def when_free(self, tenant: str, thread_id: str, seen: int = 0) -> None:
        """Drive the thread once whoever holds its lease lets go (or its lease expires, if
        that worker died). The event that woke us may have come after the holder's last
        look at the thread, so waiting, not skipping, is what keeps it from being missed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._busy_wait
        pause = _BUSY_PAUSE
        started = loop.time()
        warned = False
        while not await self.owned(tenant, thread_id, seen):
            if loop.time() >= deadline:
                raise ThreadBusy(tenant, thread_id, self._busy_wait)
            if not warned and loop.time() - started > _BUSY_WARN:
                warned = True
                holder = await self.leases.holder(lease_key(tenant, thread_id))
                log.warning(
                    "thread stays leased to another worker",
                    thread_id=thread_id,
                    holder=(holder or b"").decode(errors="replace"),
                    waited=round(loop.time() - started, 1),
                )
            await asyncio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, _BUSY_PAUSE_MAX)

    async def until_moved_or_free(self, tenant: str, state: ThreadState) -> None:
        """Wait, at most `_HOLDER_WAIT` seconds, until the thread has moved past `state`
        or nobody holds its lease any more."""
        key = lease_key(tenant, state.thread_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _HOLDER_WAIT
        pause = _HOLDER_PAUSE
        while loop.time() < deadline:
            await asyncio.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, _BUSY_PAUSE)
            if await self.leases.holder(key) is None:
                return
            moved = await self._threads.load(tenant, state.thread_id)
            if moved.position != state.position:
                return

    def _spawn(self, drive: Coroutine[Any, Any, None]) -> None:
        if self._background is None:
            drive.close()
            return
        task = self._background.create_task(drive)
        task.add_done_callback(self._eager.discard)
        self._eager.add(task)

    async def _eager_drive(self, tenant: str, thread_id: str, start: StartState | None) -> None:
        if self.driver.lock(tenant, thread_id).locked():
            return  # this process drives it already; the trigger makes sure nothing is missed
        try:
            with structlog.contextvars.bound_contextvars(tenant_id=tenant, thread_id=thread_id):
                await self.owned(tenant, thread_id, start=start)
        except Exception:  # the trigger's delivery retries and dead-letters properly
            log.warning("eager drive failed; the trigger will retry", exc_info=True)

    async def _drive_decision(
        self,
        tenant: str,
        state: ThreadState,
        decision: Decision,
        checked: asyncio.Future[ThreadState] | None,
    ) -> None:
        thread_id = state.thread_id
        start: asyncio.Future[ThreadState | None] = asyncio.get_running_loop().create_future()
        if checked is None:
            start.set_result(state)
        else:
            _chain(checked, start)
        try:
            with structlog.contextvars.bound_contextvars(tenant_id=tenant, thread_id=thread_id):
                owned = await self.owned(tenant, thread_id, start=start, decision=decision)
            decision.leased_elsewhere = not owned
        except Exception:  # the decision is stored the usual way; the trigger retries
            log.warning("drive of a command's decision failed", exc_info=True)
        finally:
            decision.missed()  # a no-op once it landed
            if checked is not None:
                await cancel_and_wait([checked])  # not awaited when the lease was not had
                if start.done() and not start.cancelled():
                    start.exception()  # read, so a failure the drive never saw is not reported

    async def _bounded(
        self,
        tenant: str,
        thread_id: str,
        seen: int,
        start: StartState | None,
        decision: Decision | None,
    ) -> ThreadState:
        """`drive_locked`, stopped when it appends nothing for `end_after` seconds. Every
        wait inside is bounded on its own; this bounds what a bug or an unforeseen hang
        would otherwise hold forever (the lease renews for as long as the process lives)."""
        with self.driver.watched(tenant, thread_id) as appends:
            task = asyncio.ensure_future(
                self.driver.drive_locked(
                    tenant, thread_id, seen=seen, start=start, decision=decision
                )
            )
            try:
                while True:
                    before = appends()
                    done, _ = await asyncio.wait({task}, timeout=self._end_after)
                    if done:
                        return task.result()
                    if appends() == before:
                        log.error(
                            "drive stalled; stopping it", thread_id=thread_id, idle=self._end_after
                        )
                        raise DriveStalled(thread_id, self._end_after)
            finally:
                await cancel_and_wait([task])


def _chain(source: asyncio.Future[ThreadState], into: asyncio.Future[ThreadState | None]) -> None:
    """`into` gets `source`'s result or exception when it has one."""

    def done(future: asyncio.Future[ThreadState]) -> None:
        if into.done():
            return
        if future.cancelled():
            into.cancel()
        elif (error := future.exception()) is not None:
            into.set_exception(error)
        else:
            into.set_result(future.result())

    source.add_done_callback(done)
