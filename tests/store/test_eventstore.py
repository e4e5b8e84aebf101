"""The event store against a real JetStream server."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg

from agency.contracts.events import (
    FileWritten,
    MessageAppended,
    RunCanceled,
    RunStarted,
    RunTick,
    ThreadCreated,
)
from agency.contracts.events.base import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.subjects import (
    EVENT_TYPE_HEADER,
    EVENTS_STREAM,
    event_subject,
    note_subject,
    tenant_events_filter,
)
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import BatchTooLarge, ConcurrencyError
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.reader import OrderedReader
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent


def user(text: str) -> MessageAppended:
    return MessageAppended(message=ChatMessage(role="user", content=text))


async def test_append_then_read_returns_events_in_order_with_gapless_seq(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    created = ThreadCreated(agency_id="a1", agent_type="helper")
    first = await bus.store.append(tenant, "thread", thread, [created], expected=Position())
    second = await bus.store.append(
        tenant, "thread", thread, [user("hi"), user("there")], expected=first.position
    )

    events = await bus.store.read(tenant, "thread", thread)

    assert [e.seq for e in events] == [1, 2, 3]
    assert [e.type for e in events] == ["thread.created", "message.appended", "message.appended"]
    assert events[0].payload == created
    assert events[-1].position == second.position
    assert events[0].envelope.thread_id == thread


async def test_stale_expected_position_is_refused_with_expected_and_actual(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    done = await bus.store.append(tenant, "thread", thread, [user("one")], expected=Position())

    with pytest.raises(ConcurrencyError) as info:
        await bus.store.append(tenant, "thread", thread, [user("two")], expected=Position())

    assert info.value.expected_stream_seq == 0
    assert info.value.actual_stream_seq == done.position.stream_seq
    assert "reload the aggregate" in str(info.value)


async def test_refused_batch_stores_none_of_its_events(bus: Bus, tenant: str) -> None:
    thread = new_id()
    await bus.store.append(tenant, "thread", thread, [user("one")], expected=Position())

    with pytest.raises(ConcurrencyError):
        await bus.store.append(
            tenant, "thread", thread, [user("a"), user("b"), user("c")], expected=Position()
        )

    assert [e.seq for e in await bus.store.read(tenant, "thread", thread)] == [1]


async def test_batch_is_stored_contiguously_and_atomically(bus: Bus, tenant: str) -> None:
    thread = new_id()
    result = await bus.store.append(
        tenant,
        "thread",
        thread,
        [RunStarted(run_id="r1", agent_type="x", max_steps=5), RunTick(run_id="r1", step=1)],
        expected=Position(),
        context=EventContext(agency_id="ag", correlation_id="root"),
    )

    stream_seqs = [e.stream_seq for e in result.events]
    assert stream_seqs == [stream_seqs[0], stream_seqs[0] + 1]
    stored = await bus.store.read(tenant, "thread", thread)
    assert [e.stream_seq for e in stored] == stream_seqs
    assert all(e.envelope.correlation_id == "root" and e.envelope.run_id == "r1" for e in stored)


async def test_same_idempotency_key_is_stored_once(bus: Bus, tenant: str) -> None:
    thread = new_id()
    events = [user("a"), user("b")]
    first = await bus.store.append(
        tenant, "thread", thread, events, expected=Position(), idempotency_key="k1"
    )
    again = await bus.store.append(
        tenant, "thread", thread, events, expected=Position(), idempotency_key="k1"
    )
    single = await bus.store.append(
        tenant, "thread", thread, [user("c")], expected=first.position, idempotency_key="k2"
    )
    single_again = await bus.store.append(
        tenant, "thread", thread, [user("c")], expected=first.position, idempotency_key="k2"
    )

    assert not first.duplicate and again.duplicate
    assert not single.duplicate and single_again.duplicate
    stored = await bus.store.read(tenant, "thread", thread)
    assert [e.seq for e in stored] == [1, 2, 3]
    # The key is kept in the log, so a repeat is recognisable after the broker's window.
    assert [e.envelope.idempotency_key for e in stored] == ["k1", "k1", "k2"]


async def test_concurrent_appenders_win_each_sequence_exactly_once(
    nats_url: str, tenant: str
) -> None:
    thread = new_id()
    writers, per_writer = 6, 15

    async def writer(index: int, store: EventStore) -> int:
        conflicts = 0
        written = 0
        while written < per_writer:
            events = await store.read(tenant, "thread", thread)
            position = events[-1].position if events else Position()
            try:
                await store.append(
                    tenant,
                    "thread",
                    thread,
                    [user(f"w{index}-{written}"), user(f"w{index}-{written}-b")],
                    expected=position,
                )
            except ConcurrencyError:
                conflicts += 1
                continue
            written += 1
        return conflicts

    buses = [await Bus(nats_url, name=f"writer-{i}").connect() for i in range(writers)]
    try:
        conflicts = await asyncio.gather(*(writer(i, b.store) for i, b in enumerate(buses)))
        stored = await buses[0].store.read(tenant, "thread", thread)
    finally:
        for b in buses:
            await b.close()

    assert sum(conflicts) > 0, "the writers never raced; the test proves nothing"
    assert [e.seq for e in stored] == list(range(1, writers * per_writer * 2 + 1))
    # Each decision's two events are adjacent: batches never interleave.
    texts = [e.payload.message.content for e in stored]  # type: ignore[attr-defined]
    assert all(texts[i + 1] == texts[i] + "-b" for i in range(0, len(texts), 2))
    assert len({e.envelope.event_id for e in stored}) == len(stored)


async def test_last_position_names_the_newest_event(bus: Bus, tenant: str) -> None:
    thread = new_id()
    assert await bus.store.last_position(tenant, "thread", thread) == Position()
    a = await bus.store.append(tenant, "thread", thread, [user("x")], expected=Position())
    b = await bus.store.append(
        tenant,
        "thread",
        thread,
        [FileWritten(path="/a", content="1"), user("y")],
        expected=a.position,
    )
    assert await bus.store.last_position(tenant, "thread", thread) == b.position


async def test_read_after_position_returns_only_newer_events(bus: Bus, tenant: str) -> None:
    thread = new_id()
    first = await bus.store.append(
        tenant, "thread", thread, [user("1"), user("2")], expected=Position()
    )
    await bus.store.append(tenant, "thread", thread, [user("3")], expected=first.position)
    newer = await bus.store.read(tenant, "thread", thread, after=first.position)
    assert [e.seq for e in newer] == [3]


async def test_a_read_from_the_leader_sees_what_a_direct_read_sees_past_garbage(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    first = await bus.store.append(tenant, "thread", thread, [user("1")], expected=Position())
    await bus.js.publish(f"tenant.{tenant}.evt.thread.{thread}.message_appended", b"garbage")
    _, past_garbage = await bus.store.read_positioned(tenant, "thread", thread)
    await bus.store.append(tenant, "thread", thread, [user("2"), user("3")], expected=past_garbage)
    other = new_id()  # another thread's events are not read
    await bus.store.append(tenant, "thread", other, [user("x")], expected=Position())

    direct = await bus.store.read_positioned(tenant, "thread", thread, after=first.position)
    leader = await bus.store.read_positioned(
        tenant, "thread", thread, after=first.position, from_leader=True
    )
    assert [e.seq for e in leader[0]] == [e.seq for e in direct[0]] == [2, 3]
    assert leader[1] == direct[1]
    assert [e.envelope.event_id for e in leader[0]] == [e.envelope.event_id for e in direct[0]]


async def test_read_spans_more_than_one_direct_get_batch(bus: Bus, tenant: str) -> None:
    thread = new_id()
    position = Position()
    for chunk in range(3):
        result = await bus.store.append(
            tenant, "thread", thread, [user(f"{chunk}-{i}") for i in range(500)], expected=position
        )
        position = result.position
    stored = await bus.store.read(tenant, "thread", thread)
    assert [e.seq for e in stored] == list(range(1, 1501))


async def test_batch_over_the_atomic_limit_is_refused_before_publishing(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    with pytest.raises(BatchTooLarge, match="exceeds the atomic batch limit of 1000"):
        await bus.store.append(tenant, "thread", thread, [user("x")] * 1001, expected=Position())
    assert await bus.store.read(tenant, "thread", thread) == []


async def test_ordered_reader_backfills_then_follows_live_without_gap_or_duplicate(
    bus: Bus, tenant: str
) -> None:
    threads = [new_id() for _ in range(3)]
    positions = {t: Position() for t in threads}
    for t in threads:
        positions[t] = (
            await bus.store.append(tenant, "thread", t, [user("early")], expected=Position())
        ).position

    seen: list[RecordedEvent] = []
    async with OrderedReader(bus.js, tenant_events_filter(tenant), batch=2) as reader:
        while len(seen) < 3:
            seen.extend(
                e for e in await reader.next_batch(timeout=2.0) if isinstance(e, RecordedEvent)
            )
        for t in threads:
            positions[t] = (
                await bus.store.append(tenant, "thread", t, [user("late")], expected=positions[t])
            ).position
        while len(seen) < 6:
            seen.extend(
                e for e in await reader.next_batch(timeout=2.0) if isinstance(e, RecordedEvent)
            )
        assert await reader.next_batch(timeout=0.3) == []

    stream_seqs = [e.stream_seq for e in seen]
    assert stream_seqs == sorted(stream_seqs)
    assert len(set(stream_seqs)) == 6
    assert [e.payload.message.content for e in seen] == ["early"] * 3 + ["late"] * 3  # type: ignore[attr-defined]


async def test_ordered_reader_of_several_subjects_delivers_only_those_in_stream_order(
    bus: Bus, tenant: str
) -> None:
    threads = [new_id() for _ in range(3)]
    created = ThreadCreated(agency_id="a1", agent_type="helper")
    started = RunStarted(run_id="r1", agent_type="helper", max_steps=5)
    positions: dict[str, Position] = {}
    for thread in threads:
        first = await bus.store.append(tenant, "thread", thread, [created], expected=Position())
        positions[thread] = first.position
    for thread in threads:
        await bus.store.append(
            tenant, "thread", thread, [started, user("hi")], expected=positions[thread]
        )
    wanted = [threads[0], threads[2]]
    subjects = [event_subject(tenant, "thread", t) for t in wanted]

    seen: list[RecordedEvent] = []
    async with OrderedReader(bus.js, subjects) as reader:
        while len(seen) < 6:
            seen.extend(
                e for e in await reader.next_batch(timeout=2.0) if isinstance(e, RecordedEvent)
            )
        assert await reader.next_batch(timeout=0.3) == []

    assert [(e.envelope.aggregate_id, e.seq) for e in seen] == [
        (wanted[0], 1), (wanted[1], 1), (wanted[0], 2), (wanted[0], 3), (wanted[1], 2),
        (wanted[1], 3),
    ]  # fmt: skip
    assert [e.stream_seq for e in seen] == sorted(e.stream_seq for e in seen)


async def test_every_event_of_an_aggregate_is_on_its_one_subject_with_its_type_in_a_header(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    created = ThreadCreated(agency_id="a1", agent_type="helper")
    first = await bus.store.append(tenant, "thread", thread, [created], expected=Position())
    started = RunStarted(run_id="r1", agent_type="helper", max_steps=5)
    await bus.store.append(tenant, "thread", thread, [started, user("hi")], expected=first.position)

    subject = event_subject(tenant, "thread", thread)
    info = await bus.js.stream_info(EVENTS_STREAM, subjects_filter=subject)
    assert info.state.subjects == {subject: 3}
    types, start = [], 1
    for _ in range(3):
        msg = await bus.js.get_msg(EVENTS_STREAM, seq=start, subject=subject, next=True)
        assert msg.subject == subject and msg.seq is not None
        types.append((msg.headers or {}).get(EVENT_TYPE_HEADER))
        start = msg.seq + 1
    assert types == ["thread.created", "run.started", "message.appended"]


async def test_a_run_canceled_is_announced_on_its_note_subject_and_nothing_else_is(
    bus: Bus, tenant: str
) -> None:
    notes: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()

    async def heard(msg: Msg) -> None:
        await notes.put((msg.subject, msg.data))

    sub = await bus.nc.subscribe(f"tenant.{tenant}.note.>", cb=heard)
    try:
        thread = new_id()
        created = ThreadCreated(agency_id="a1", agent_type="helper")
        first = await bus.store.append(tenant, "thread", thread, [created], expected=Position())
        started = RunStarted(run_id="r1", agent_type="helper", max_steps=5)
        canceled = RunCanceled(run_id="r1", reason="asked")
        result = await bus.store.append(
            tenant, "thread", thread, [started, user("hi"), canceled], expected=first.position
        )
        subject, data = await asyncio.wait_for(notes.get(), timeout=5)
        assert subject == note_subject(tenant, "run.canceled")
        assert data == result.events[-1].raw
        await bus.nc.flush(timeout=5)
        assert notes.empty()
    finally:
        await sub.unsubscribe()
