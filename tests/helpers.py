"""Bounded waiting for tests: poll a condition instead of sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def assert_eventually(
    fn: Callable[[], Awaitable[T]], *, timeout: float = 10.0, interval: float = 0.05
) -> T:
    """Call `fn` until it returns without raising AssertionError, at most `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await fn()
        except AssertionError:
            if loop.time() >= deadline:
                raise
        await asyncio.sleep(interval)


def settled(events: list[Any]) -> list[Any]:
    """A thread's events without the runtime's `checkpoint.saved` (each follows a pause or a
    run's end in the same append): for tests about what came last."""
    return [e for e in events if e.type != "checkpoint.saved"]
