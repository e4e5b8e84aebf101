"""Per-key locks that are shared while in use and gone once nobody uses them."""

from __future__ import annotations

import asyncio

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.infra.keyed_locks import KeyedLocks
from tests.store.test_eventstore import user


async def test_tasks_of_one_key_share_a_lock_that_is_dropped_after_them() -> None:
    locks: KeyedLocks[str] = KeyedLocks()
    inside: list[str] = []
    order: list[str] = []

    async def work(name: str, key: str) -> None:
        async with locks.lock(key):
            inside.append(name)
            assert len([n for n in inside if n.startswith(key)]) == 1, "two holders at once"
            await asyncio.sleep(0)
            order.append(name)
            inside.remove(name)

    await asyncio.gather(*(work(f"a{i}", "a") for i in range(5)), work("b0", "b"))
    assert [n for n in order if n.startswith("a")] == [f"a{i}" for i in range(5)]
    assert len(locks) == 0
    assert not locks.held("a")
    held = locks.lock("a")
    async with held:
        assert locks.held("a") and locks.lock("a") is held
    assert not locks.held("a")


async def test_a_task_arriving_as_the_holder_lets_go_queues_behind_the_waiter() -> None:
    """The holder releases while another task waits: a third task gets the same lock, so
    it cannot run beside the waiter (a map that dropped the lock on release would hand it
    a fresh one)."""
    locks: KeyedLocks[str] = KeyedLocks()
    order: list[str] = []

    async def hold(name: str) -> None:
        async with locks.lock("k"):
            order.append(f"{name} in")
            await asyncio.sleep(0)
            order.append(f"{name} out")

    first = locks.lock("k")
    await first.acquire()
    waiter = asyncio.create_task(hold("waiter"))
    await asyncio.sleep(0)  # one turn of the loop: the waiter runs until it queues
    assert first._waiters, "the waiter is not queued on the lock"
    first.release()
    del first
    late = asyncio.create_task(hold("late"))
    await asyncio.gather(waiter, late)
    assert order == ["waiter in", "waiter out", "late in", "late out"]
    assert len(locks) == 0


async def test_the_event_store_keeps_no_lock_of_an_aggregate_it_is_done_with(
    bus: Bus, tenant: str
) -> None:
    threads = [new_id() for _ in range(20)]
    await asyncio.gather(
        *(bus.store.append(tenant, "thread", t, [user("hi")], expected=Position()) for t in threads)
    )
    assert len(bus.store._locks) == 0
