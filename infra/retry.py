"""The one retry policy: bounded, exponential, jittered waits, run by `stamina`.

A `RetryPolicy` names the attempts, the time budget and the waits; `call` retries an
operation while a predicate calls its error transient (`stamina` logs each retry through
structlog). `delay(n)` is the same schedule for waits we do not sleep ourselves: the
broker's redelivery delay of a nak, a service's restart. `until_stopped` bounds any wait by
a stop event, so a worker that retries never delays its own shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import stamina
import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

Transient = Callable[[Exception], bool]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`attempts` (None: no limit) within `timeout` seconds (None: no limit); waits start at
    `wait_initial`, grow by `wait_exp_base` per attempt up to `wait_max`, plus up to
    `wait_jitter` seconds of jitter."""

    attempts: int | None = 6
    timeout: float | None = 30.0
    wait_initial: float = 0.2
    wait_max: float = 5.0
    wait_jitter: float = 0.2
    wait_exp_base: float = 2.0

    async def call(
        self,
        transient: Transient,
        operation: Callable[P, Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`operation(*args, **kwargs)`, retried while it raises what `transient` accepts;
        the last error is raised once the attempts or the time budget are spent.

        The first attempt is made as is: stamina's machinery costs more than most of what it
        guards (an ack, a handler that succeeds) and is set up only once an attempt failed,
        for the rest of the same schedule (the first wait, then stamina from the second)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            return await operation(*args, **kwargs)
        except Exception as e:
            if not transient(e) or self.attempts == 1:
                raise
            log.warning("retrying after a transient failure", attempt=1, error=repr(e))
            first_wait = self.delay(1)
            spent = loop.time() - started + first_wait
            if self.timeout is not None and spent >= self.timeout:
                raise
        await asyncio.sleep(first_wait)
        caller = stamina.AsyncRetryingCaller(
            attempts=None if self.attempts is None else self.attempts - 1,
            timeout=None if self.timeout is None else self.timeout - spent,
            wait_initial=min(self.wait_initial * self.wait_exp_base, self.wait_max),
            wait_max=self.wait_max,
            wait_jitter=self.wait_jitter,
            wait_exp_base=self.wait_exp_base,
        )
        return await caller(_retryable(transient), operation, *args, **kwargs)

    def delay(self, attempt: int) -> float:
        """The wait after the `attempt`-th failure (1-based), jitter included."""
        exponent = max(attempt - 1, 0)
        base = min(self.wait_initial * self.wait_exp_base**exponent, self.wait_max)
        return base + random.uniform(0, self.wait_jitter)

    def wait_after(self, failures: int, spent: float) -> float | None:
        """The wait before trying again after `failures` in a row that took `spent`
        seconds, for a loop that retries by itself (`call` cannot wrap it); None once the
        attempts or the time budget are spent."""
        if self.attempts is not None and failures >= self.attempts:
            return None
        wait = self.delay(failures)
        if self.timeout is not None and spent + wait >= self.timeout:
            return None
        return wait


def _retryable(transient: Transient) -> Transient:
    # stamina hands a predicate every BaseException, cancellation included: a cancelled
    # operation must end, never be retried.
    def retryable(exc: BaseException) -> bool:
        return isinstance(exc, Exception) and transient(exc)

    return retryable


async def until_stopped(stop: asyncio.Event, work: Coroutine[Any, Any, T]) -> T | None:
    """Await `work` unless `stop` is set first; then cancel it and return None."""
    task = asyncio.ensure_future(work)
    if stop.is_set():
        task.cancel()
        await asyncio.wait([task])
        return None
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            # `wait`, not `await task`: a cancellation of our own caller must still propagate.
            await asyncio.wait([task])
    if task.cancelled():
        return None
    return task.result()


async def sleep_until_stopped(stop: asyncio.Event, seconds: float) -> None:
    """Sleep `seconds`, or less when `stop` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.0))
