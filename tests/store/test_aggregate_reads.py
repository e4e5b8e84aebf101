"""Reads of one aggregate are bounded by the events they expect, across long gaps too."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from agency.contracts.events import MessageAppended
from agency.contracts.events.base import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.subjects import event_subject
from agency.infra.jetstream import aggregate_reads
from agency.infra.jetstream.aggregate_reads import AggregateReads, scan_from
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import StoreTimeout
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import Position, RecordedEvent

# How far back from an aggregate's last message its newest events are looked for first; a
# gap longer than this is one the reads must not walk.
NEAR = 20
MESSAGES = frozenset({"message.appended"})


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


async def test_the_newest_event_of_a_kind_is_found_back_across_long_gaps_and_garbage(
    bus: Bus, tenant: str
) -> None:
    """Spans that double reach an event far back in the stream, asking only for the
    aggregate's own events in each; what matches nothing is looked for back to its start."""
    thread = new_id()
    wanted = await bus.store.append(
        tenant, "thread", thread, [user("wanted"), user("x")], expected=Position()
    )
    await other_traffic(bus, tenant)
    await bus.js.publish(bus.store.subject(tenant, "thread", thread), b"garbage")
    await other_traffic(bus, tenant, count=300)
    _, past_garbage = await bus.store.read_positioned(
        tenant, "thread", thread, after=wanted.position
    )
    late = await bus.store.append(
        tenant, "thread", thread, [user("y"), user("wanted"), user("z")], expected=past_garbage
    )
    end = late.events[-1]

    def saying(text: str) -> Callable[[RecordedEvent], bool]:
        return lambda e: (
            isinstance(e.payload, MessageAppended) and e.payload.message.content == text
        )

    async def newest(text: str, types: frozenset[str] = MESSAGES) -> RecordedEvent | None:
        return await bus.store.newest(
            tenant, "thread", thread, before=end, types=types, match=saying(text)
        )

    async with direct_gets(bus) as seen:
        found = await newest("wanted")
    assert found is not None and found.position == late.events[1].position
    assert sum(batch_sizes(seen)) <= 3
    async with direct_gets(bus) as seen:
        found = await newest("x")
    assert found is not None and found.position == wanted.events[1].position
    # The thread's own 5 messages and the garbage, each span's first asked for alone.
    assert sum(batch_sizes(seen)) <= 2 * 10
    assert await newest("never said") is None
    assert await newest("z") is None  # not before `end`: `end` itself
    assert await newest("x", frozenset({"thread.created"})) is None


async def test_a_read_the_server_left_unanswered_is_asked_again(
    bus: Bus, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that timed out (the server, or this process, stalled) is asked again within
    the store's budget; one that never gets an answer ends with `StoreTimeout`."""
    thread = new_id()
    await bus.store.append(tenant, "thread", thread, [user("hello")], expected=Position())
    answered = AggregateReads.after
    asked: list[str] = []

    async def stalled_once(
        self: AggregateReads, family: str, position: Position
    ) -> tuple[list[RecordedEvent], Position]:
        asked.append(family)
        if len(asked) == 1:
            raise StoreTimeout(f"read of {family}", 2.0)
        return await answered(self, family, position)

    monkeypatch.setattr(AggregateReads, "after", stalled_once)
    (event,) = await bus.store.read(tenant, "thread", thread)
    assert isinstance(event.payload, MessageAppended) and len(asked) == 2

    async def never(
        self: AggregateReads, family: str, position: Position
    ) -> tuple[list[RecordedEvent], Position]:
        asked.append(family)
        raise StoreTimeout(f"read of {family}", 2.0)

    monkeypatch.setattr(AggregateReads, "after", never)
    store = EventStore(bus.nc, bus.js, retry_budget=1.0, layout=bus.layout)
    asked.clear()
    with pytest.raises(StoreTimeout):
        await store.read(tenant, "thread", thread)
    assert 2 <= len(asked) <= 4, asked


async def test_a_scan_whose_page_stalls_goes_on_from_where_it_stood(
    bus: Bus, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan's page the server stops answering part-way is asked again from the first
    message not yet passed: every message comes once, in order; a page never answered
    ends the scan with `StoreTimeout`, at once where the caller retries the whole read."""
    thread = new_id()
    texts = [str(i) for i in range(5)]
    await bus.store.append(tenant, "thread", thread, [user(t) for t in texts], expected=Position())
    family = event_subject(tenant, "thread", thread)
    answered = aggregate_reads.direct_batch
    pages: list[int] = []

    async def stalls_after_two(
        nc: NATS, stream: str, request: dict[str, Any], timeout: float
    ) -> AsyncIterator[Msg]:
        pages.append(int(request["seq"]))
        count = 0
        async for msg in answered(nc, stream, request, timeout):
            if len(pages) == 1 and count == 2:
                raise StoreTimeout(f"read of {request}", timeout)
            count += 1
            yield msg

    monkeypatch.setattr(aggregate_reads, "direct_batch", stalls_after_two)
    scanned = [r async for r in scan_from(bus.nc, bus.store.stream, family, 1, 2.0)]
    assert [r.payload.message.content for r in scanned if isinstance(r, RecordedEvent)] == texts  # type: ignore[union-attr]
    assert len(pages) == 2 and pages[1] == scanned[2].stream_seq

    async def never(
        nc: NATS, stream: str, request: dict[str, Any], timeout: float
    ) -> AsyncIterator[Msg]:
        pages.append(int(request["seq"]))
        raise StoreTimeout(f"read of {request}", timeout)
        yield  # an async generator, as the server's pages are

    monkeypatch.setattr(aggregate_reads, "direct_batch", never)
    pages.clear()
    with pytest.raises(StoreTimeout):
        _ = [r async for r in scan_from(bus.nc, bus.store.stream, family, 1, 2.0)]
    assert 2 <= len(pages) <= 4, pages
    pages.clear()
    with pytest.raises(StoreTimeout):
        _ = [r async for r in scan_from(bus.nc, bus.store.stream, family, 1, 2.0, retry=None)]
    assert len(pages) == 1
