"""Stopping tasks for sure, within a bound.

On Python 3.11 a cancellation can be lost: `asyncio.wait_for` (which nats-py uses for every
request) returns the result and drops a `cancel()` that arrives as the answer does. A task
told once to stop may therefore carry on, and an unbounded wait for it hangs its owner.
`cancel_and_wait` cancels again until the tasks are done, for a bounded time; loops that
must stop check `cancel_requested()` after each awaited operation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import structlog

log = structlog.get_logger(__name__)


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any]], *, timeout: float = 10.0, every: float = 0.5
) -> bool:
    """Cancel the tasks (again every `every` seconds) until all are done or `timeout` has
    passed; whether all are done. Never raises what the tasks raised."""
    pending = {t for t in tasks if not t.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            log.error("tasks did not stop when cancelled", tasks=len(pending))
            return False
        _, pending = await asyncio.wait(pending, timeout=min(every, left))
    return True


def cancel_requested() -> bool:
    """Whether the current task has been told to stop (even if a cancellation was lost)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
