"""Tasks are stopped for sure: a cancellation swallowed once (as `asyncio.wait_for` does on
Python 3.11 when the answer arrives with the cancel) does not keep a task running."""

from __future__ import annotations

import asyncio
import contextlib

from agency.infra.tasks import cancel_and_wait, cancel_requested


async def swallows_one_cancel(rounds: list[int]) -> None:
    swallowed = False
    while True:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True  # what a lost cancellation looks like from inside
        rounds.append(1)


async def test_a_task_that_swallows_a_cancel_is_cancelled_again_and_stops() -> None:
    rounds: list[int] = []
    task = asyncio.create_task(swallows_one_cancel(rounds))
    await asyncio.sleep(0.1)
    assert await cancel_and_wait([task], timeout=5, every=0.2)
    assert task.cancelled()


async def test_a_task_that_will_not_stop_is_given_up_on_within_the_bound() -> None:
    released = asyncio.Event()

    async def stubborn() -> None:
        while not released.is_set():
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert not await cancel_and_wait([task], timeout=0.5, every=0.1)
    assert not task.done()
    released.set()
    await task


async def test_cancel_requested_sees_a_cancel_that_was_swallowed() -> None:
    seen: list[bool] = []

    async def loop() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # swallowed
            await asyncio.sleep(10)
        seen.append(cancel_requested())

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    task.cancel()
    await task
    assert seen == [True]
