"""The one retry policy: transient failures retried within bounds, nothing else, never a
cancellation."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from agency.infra.retry import RetryPolicy, until_stopped

QUICK = RetryPolicy(attempts=4, timeout=5.0, wait_initial=0.001, wait_max=0.01, wait_jitter=0.0)


def transient(exc: Exception) -> bool:
    return isinstance(exc, ConnectionError)


async def test_a_transient_failure_is_retried_until_it_succeeds() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("away")
        return "done"

    assert await QUICK.call(transient, flaky) == "done"
    assert len(calls) == 3


async def test_attempts_are_bounded_and_the_last_error_is_raised() -> None:
    calls: list[int] = []

    async def down() -> None:
        calls.append(1)
        raise ConnectionError(f"away {len(calls)}")

    with pytest.raises(ConnectionError, match="away 4"):
        await QUICK.call(transient, down)
    assert len(calls) == QUICK.attempts


async def test_the_waits_between_attempts_grow_on_one_schedule_within_the_time_budget() -> None:
    policy = RetryPolicy(attempts=None, timeout=0.5, wait_initial=0.04, wait_jitter=0.0)
    loop = asyncio.get_running_loop()
    made: list[float] = []

    async def down() -> None:
        made.append(loop.time())
        raise ConnectionError(f"away {len(made)}")

    with pytest.raises(ConnectionError, match="away 5"):
        await policy.call(transient, down)
    waits = [later - earlier for earlier, later in itertools.pairwise(made)]
    # 0.04, 0.08, 0.16, 0.32: the fifth attempt is past the 0.5 s budget, so it is the last.
    for wait, planned in zip(waits, (0.04, 0.08, 0.16, 0.32), strict=True):
        assert planned <= wait < planned + 0.15, waits


async def test_an_error_that_is_not_transient_is_raised_at_once() -> None:
    calls: list[int] = []

    async def wrong() -> None:
        calls.append(1)
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await QUICK.call(transient, wrong)
    assert len(calls) == 1


async def test_a_cancelled_operation_is_never_retried() -> None:
    calls: list[int] = []
    entered = asyncio.Event()

    async def slow() -> None:
        calls.append(1)
        entered.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(QUICK.call(lambda e: True, slow))
    await asyncio.wait_for(entered.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=5)
    assert len(calls) == 1


async def test_until_stopped_returns_the_result_or_none_once_stop_is_set() -> None:
    stop = asyncio.Event()

    async def answer() -> int:
        return 42

    assert await until_stopped(stop, answer()) == 42
    waiting = asyncio.create_task(until_stopped(stop, asyncio.Event().wait()))
    stop.set()
    assert await asyncio.wait_for(waiting, timeout=5) is None


def test_delay_grows_to_its_bound() -> None:
    policy = RetryPolicy(wait_initial=0.5, wait_max=4.0, wait_jitter=0.0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
