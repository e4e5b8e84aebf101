"""Reads of one aggregate are bounded by the events they expect, across long gaps too."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nats.aio.msg import Msg

from agency.contracts.events import MessageAppended
from agency.contracts.events.base import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.subjects import event_subject
from agency.infra.jetstream.aggregate_reads import AggregateReads
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position

# How far back from an aggregate's last message its newest events are looked for first; a
# gap longer than this is one the reads must not walk.
NEAR = 20


def user(text: str) -> MessageAppended:
    return MessageAppended(message=ChatMessage(role="user", content=text))


def reads_of(bus: Bus) -> AggregateReads:
    return AggregateReads(bus.nc, bus.store.stream, 2.0, near=NEAR)


async def other_traffic(bus: Bus, tenant: str, count: int = 3 * NEAR) -> None:
    """`count` events of another thread, as many other threads would leave between two."""
    other = [user(str(i)) for i in range(count)]
    await bus.store.append(tenant, "thread", new_id(), other, expected=Position())


@asynccontextmanager
async def direct_gets(bus: Bus) -> AsyncIterator[list[Msg]]:
    """The direct get requests sent to the events stream while the block runs."""
    seen: list[Msg] = []

    async def record(msg: Msg) -> None:
        seen.append(msg)

    sub = await bus.nc.subscribe(f"$JS.API.DIRECT.GET.{bus.store.stream}", cb=record)
    try:
        yield seen
    finally:
        await bus.nc.flush()
        await sub.unsubscribe()


def batch_sizes(requests: list[Msg]) -> list[int]:
    return [json.loads(r.data)["batch"] for r in requests if "batch" in json.loads(r.data)]


async def test_a_read_across_a_long_gap_returns_both_bursts_in_order(bus: Bus, tenant: str) -> None:
    thread = new_id()
    family, reads = event_subject(tenant, "thread", thread), reads_of(bus)
    early = await bus.store.append(
        tenant, "thread", thread, [user(str(i)) for i in range(1, 4)], expected=Position()
    )
    await other_traffic(bus, tenant)
    late = await bus.store.append(
        tenant, "thread", thread, [user(str(i)) for i in range(4, 7)], expected=early.position
    )
    first_two = early.events[1].position

    async with direct_gets(bus) as seen:
        whole, position = await reads.after(family, Position())
    assert [e.payload.message.content for e in whole] == ["1", "2", "3", "4", "5", "6"]
    assert position == late.position
    assert batch_sizes(seen) and max(batch_sizes(seen)) <= 6
    for after, expected in [
        (first_two, [3, 4, 5, 6]),
        (early.position, [4, 5, 6]),
        (late.events[1].position, [6]),
        (late.position, []),
    ]:
        async with direct_gets(bus) as seen:
            newer, position = await reads.after(family, after)
        assert [e.seq for e in newer] == expected
        assert position == late.position
        # Each batch asks for no more than the events it lacks: none walks on past them.
        assert all(size <= len(expected) for size in batch_sizes(seen))


async def test_a_read_with_nothing_new_or_one_event_new_asks_the_server_once(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    family, reads = event_subject(tenant, "thread", thread), reads_of(bus)
    parked = await bus.store.append(
        tenant, "thread", thread, [user("1"), user("2")], expected=Position()
    )
    await other_traffic(bus, tenant)

    async with direct_gets(bus) as seen:
        nothing, _ = await reads.after(family, parked.position)
    assert nothing == []
    assert len(seen) == 1

    approved = await bus.store.append(
        tenant, "thread", thread, [user("3")], expected=parked.position
    )
    async with direct_gets(bus) as seen:
        newer, position = await reads.after(family, parked.position)
    assert [e.seq for e in newer] == [3]
    assert position == approved.position
    assert len(seen) == 1


async def test_garbage_among_the_events_is_skipped_and_passed_after_a_long_gap(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    family, reads = event_subject(tenant, "thread", thread), reads_of(bus)
    early = await bus.store.append(tenant, "thread", thread, [user("1")], expected=Position())
    await other_traffic(bus, tenant)
    await bus.js.publish(family, b"garbage")
    _, past_garbage = await bus.store.read_positioned(
        tenant, "thread", thread, after=early.position
    )
    assert past_garbage.seq == 1 and past_garbage.stream_seq > early.position.stream_seq
    late = await bus.store.append(
        tenant, "thread", thread, [user("2"), user("3")], expected=past_garbage
    )

    whole, position = await reads.after(family, Position())
    assert [e.seq for e in whole] == [1, 2, 3]
    assert position == late.position
    newer, _ = await reads.after(family, early.position)
    assert [e.seq for e in newer] == [2, 3]


async def test_the_first_event_is_read_alone(bus: Bus, tenant: str) -> None:
    thread = new_id()
    assert await bus.store.first(tenant, "thread", thread) is None
    created = await bus.store.append(
        tenant, "thread", thread, [user("1"), user("2")], expected=Position()
    )
    await other_traffic(bus, tenant)
    async with direct_gets(bus) as seen:
        first = await bus.store.first(tenant, "thread", thread)
    assert first is not None and first.position == created.events[0].position
    assert batch_sizes(seen) == [1]
