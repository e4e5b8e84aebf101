"""A message being worked on is heartbeated (`in_progress`) every third of the ack wait while
its handler runs, and no more once it has ended."""

from __future__ import annotations

import asyncio

from agency.infra.jetstream.settling import Settling
from agency.infra.jetstream.worker_tuning import WorkerRetry


class _Msg:
    """What a heartbeat uses of a NATS message: `in_progress`, counted."""

    def __init__(self) -> None:
        self.beats = 0
        self.beaten = asyncio.Event()

    async def in_progress(self) -> None:
        self.beats += 1
        if self.beats >= 2:
            self.beaten.set()


def _settling(ack_wait: float) -> Settling[object]:
    return Settling(
        durable="test",
        dead_letters=None,  # type: ignore[arg-type]  # nothing is dead-lettered here
        ack_wait=ack_wait,
        backoff=(0.1,),
        retry=WorkerRetry(),
        on_dead_letter=None,
    )


async def test_a_long_handler_is_heartbeated_until_it_ends_and_then_no_more() -> None:
    msg = _Msg()
    settling = _settling(ack_wait=0.3)
    async with settling.heartbeat(msg):  # type: ignore[arg-type]
        await asyncio.wait_for(msg.beaten.wait(), timeout=10)
    ended_at = msg.beats
    await asyncio.sleep(0.35)  # three more beats' worth of time, to see that none comes
    assert ended_at >= 2
    assert msg.beats == ended_at


async def test_a_quick_handler_is_not_heartbeated() -> None:
    msg = _Msg()
    async with _settling(ack_wait=30.0).heartbeat(msg):  # type: ignore[arg-type]
        await asyncio.sleep(0)
    assert msg.beats == 0


async def test_a_cancelled_handler_stops_its_heartbeat_and_is_cancelled() -> None:
    msg = _Msg()
    settling = _settling(ack_wait=0.3)
    started = asyncio.Event()

    async def handler() -> None:
        async with settling.heartbeat(msg):  # type: ignore[arg-type]
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(handler())
    await asyncio.wait_for(started.wait(), timeout=10)
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=10)
    assert task in done and task.cancelled()
    beats = msg.beats
    await asyncio.sleep(0.35)  # three more beats' worth of time, to see that none comes
    assert msg.beats == beats
