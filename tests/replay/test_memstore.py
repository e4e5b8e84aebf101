"""The in-memory store keeps the event store's append and read semantics."""

from __future__ import annotations

import pytest

from agency.contracts.events import ChatMessage, MessageAppended, ThreadCreated
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import EventContext, Position
from agency.services.runtime.replay.memstore import MemoryEventStore


def said(text: str) -> MessageAppended:
    return MessageAppended(message=ChatMessage(role="user", content=text))


async def test_appends_follow_the_expected_position_and_read_after_it() -> None:
    store = MemoryEventStore()
    first = await store.append(
        "t1", "thread", "a", [ThreadCreated(agency_id="g", agent_type="w")],
        expected=Position(), context=EventContext(agency_id="g", correlation_id="a"),
    )  # fmt: skip
    other = await store.append("t1", "thread", "b", [said("elsewhere")], expected=Position())
    second = await store.append(
        "t1", "thread", "a", [said("x"), said("y")], expected=first.position
    )
    assert [e.seq for e in second.events] == [2, 3]
    # One stream sequence across aggregates, as on the broker.
    assert [e.stream_seq for e in (*first.events, *other.events, *second.events)] == [1, 2, 3, 4]
    assert second.events[0].envelope.correlation_id is None
    assert first.events[0].envelope.thread_id == "a"
    assert await store.last_position("t1", "thread", "a") == Position(3, 4)
    after = await store.read("t1", "thread", "a", after=first.position)
    assert [e.seq for e in after] == [2, 3]

    with pytest.raises(ConcurrencyError) as stale:
        await store.append("t1", "thread", "a", [said("late")], expected=first.position)
    assert stale.value.actual_stream_seq == 4


async def test_a_repeated_idempotency_key_is_a_duplicate_and_copies_are_marked() -> None:
    store = MemoryEventStore()
    once = await store.append(
        "t1", "thread", "a", [said("x")], expected=Position(), idempotency_key="k"
    )
    again = await store.append(
        "t1", "thread", "a", [said("x")], expected=Position(), idempotency_key="k"
    )
    assert again.duplicate and not again.events
    copied = store.copy([once.events[0].envelope])
    assert copied[0].seq == 2 and copied[0].envelope.event_id == once.events[0].envelope.event_id
    assert store.is_copy(copied[0]) and store.is_copy(once.events[0])  # same event id
    fresh = await store.append("t1", "thread", "a", [said("y")], expected=copied[0].position)
    assert not store.is_copy(fresh.events[0])


async def test_the_hook_runs_before_the_position_is_checked() -> None:
    store = MemoryEventStore()
    first = await store.append("t1", "thread", "a", [said("x")], expected=Position())

    def land_outside_write(tenant: str, aggregate: str, aggregate_id: str) -> None:
        store.before_append = None
        store.copy([first.events[0].envelope])

    store.before_append = land_outside_write
    with pytest.raises(ConcurrencyError):
        await store.append("t1", "thread", "a", [said("y")], expected=first.position)
