"""A queue group of core NATS requests answered until a stop, each request a task of its own.

The gateway and the runtime's re-executions answer requests this way: the callback starts
a task per message and keeps it in `tasks`; on `stop` the subscription ends and the tasks
in flight get `drain_timeout` seconds, after which those still running are cancelled (and
given as long again to unwind), so nothing outlives the service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import Error as NatsError


async def answer_until_stopped(
    nc: NATS,
    subject: str,
    *,
    queue: str,
    cb: Callable[[Msg], Awaitable[None]],
    stop: asyncio.Event,
    tasks: set[asyncio.Task[None]],
    drain_timeout: float,
) -> None:
    sub = await nc.subscribe(subject, queue=queue, cb=cb)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(NatsError):
            await sub.unsubscribe()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=drain_timeout)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=drain_timeout)
