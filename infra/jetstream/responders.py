"""The requests a service answers on a core NATS queue group, each in a task of its own.

The gateway and the runtime's re-executions answer requests this way: the subscription's
callback starts a task per message (`start`); on `stop` the subscription ends and the
tasks in flight get `drain_timeout` seconds, after which those still running are cancelled
(and given as long again to unwind), so nothing outlives the service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError


class Requests:
    """Answers `subject` in the queue group `queue`; `len()` is how many are in flight."""

    def __init__(self, subject: str, *, queue: str) -> None:
        self.subject = subject
        self.queue = queue
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(
        self, work: Coroutine[Any, Any, None], done: Callable[[], None] | None = None
    ) -> None:
        """Answer one request in a task of its own; `done` runs once it has finished."""
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._finished(t, done))

    def _finished(self, task: asyncio.Task[None], done: Callable[[], None] | None) -> None:
        self._tasks.discard(task)
        if done is not None:
            done()

    async def serve(
        self, nc: NATS, cb: Callable[[Msg], Awaitable[None]], stop: asyncio.Event, drain: float
    ) -> None:
        """Hand each request to `cb` until `stop` is set; then drain (`drain` seconds)."""
        sub = await nc.subscribe(self.subject, queue=self.queue, cb=cb)
        try:
            await stop.wait()
        finally:
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()
            if self._tasks:
                _, late = await asyncio.wait(self._tasks, timeout=drain)
                for task in late:
                    task.cancel()
                if late:
                    await asyncio.wait(late, timeout=drain)
