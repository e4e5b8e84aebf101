"""The LangGraph views kept folded: a load reads on from the view kept, and every caller
gets a view of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from types import SimpleNamespace

from agency.contracts.events import ChatMessage, MessageAppended, RunCompleted, ThreadCreated
from agency.infra.jetstream.ports import AggregateRead
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.api.langgraph.follow import sse, wait_for_end
from agency.services.api.langgraph.graphstate import GraphView, RunRef, fold_view
from agency.services.api.langgraph.views import GraphViews
from agency.services.runtime.replay.memstore import MemoryEventStore


def said(text: str) -> MessageAppended:
    return MessageAppended(message=ChatMessage(role="user", content=text))


def contents(view: GraphView) -> list[str]:
    return [m["content"] for m in view.messages]


async def test_a_load_reads_on_from_the_view_kept_and_hands_out_its_own_copy() -> None:
    store = MemoryEventStore()
    views = GraphViews(store)
    created = ThreadCreated(agency_id="ag", agent_type="worker")
    written = await store.append("t", "thread", "th", [created, said("one")], expected=Position())
    first = await views.load("t", "th")
    assert contents(first) == ["one"]
    # What one request does to its view is its own.
    first.messages.append({"content": "mine"})
    now = datetime.now(UTC)
    first.run_times["r-placeholder"] = (now, now)

    await store.append("t", "thread", "th", [said("two"), said("three")], expected=written.position)
    a, b = await asyncio.gather(views.load("t", "th"), views.load("t", "th"))
    whole = fold_view("t", "th", await store.read("t", "thread", "th"))
    for view in (a, b):
        assert contents(view) == ["one", "two", "three"]
        assert view.values() == whole.values() and view.position == whole.position
        assert "r-placeholder" not in view.run_times
    assert a.messages is not b.messages
    # With nothing new in the log, the view kept is handed out as a copy all the same.
    (await views.load("t", "th")).messages.clear()
    assert contents(await views.load("t", "th")) == ["one", "two", "three"]


async def test_a_thread_not_created_is_not_kept_and_is_read_again() -> None:
    store = MemoryEventStore()
    views = GraphViews(store, capacity=1)
    assert (await views.load("t", "later")).created is None
    await store.append(
        "t", "thread", "later", [ThreadCreated(agency_id="ag", agent_type="worker")],
        expected=Position(),
    )  # fmt: skip
    assert (await views.load("t", "later")).created is not None
    # Past its capacity the least recent view goes, and is read from the start again.
    await store.append(
        "t", "thread", "other", [ThreadCreated(agency_id="ag", agent_type="worker"), said("x")],
        expected=Position(),
    )  # fmt: skip
    assert contents(await views.load("t", "other")) == ["x"]
    again = await views.load("t", "later")
    assert again.created is not None and again.tenant_id == "t"


async def test_another_tenant_naming_a_kept_thread_reads_nothing_of_it() -> None:
    store = MemoryEventStore()
    views = GraphViews(store)
    created = ThreadCreated(agency_id="ag", agent_type="worker")
    await store.append("owner", "thread", "th", [created, said("secret")], expected=Position())
    assert contents(await views.load("owner", "th")) == ["secret"]
    intruder = await views.load("intruder", "th")
    assert intruder.created is None and intruder.messages == []
    assert intruder.tenant_id == "intruder"


class CountingStore(MemoryEventStore):
    """Counts the events each read hands out."""

    def __init__(self) -> None:
        super().__init__()
        self.handed_out = 0

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        events, position = await super().fetch(read)
        self.handed_out += len(events)
        return events, position


class StoredFeed:
    """The events a wait follows, as a thread's feed hands them out."""

    def __init__(self, events: list[RecordedEvent]) -> None:
        self._events = events

    async def backfill(self) -> list[RecordedEvent]:
        return self._events

    async def live(self) -> AsyncIterator[list[RecordedEvent]]:
        return
        yield []

    async def aclose(self) -> None:
        return None


async def test_a_thread_a_wait_folded_to_its_runs_end_is_read_on_from_there() -> None:
    """A client that waits for a run and then resumes it (or asks for its state) has the
    thread read on from where the wait left it, not from where the run began."""
    store = CountingStore()
    views = GraphViews(store)
    created = ThreadCreated(agency_id="ag", agent_type="worker")
    before = await store.append("t", "thread", "th", [created, said("one")], expected=Position())
    start = await views.load("t", "th")
    run = await store.append(
        "t", "thread", "th", [said("two"), RunCompleted(run_id="r1")], expected=before.position
    )
    deps = SimpleNamespace(graph_views=views)
    ended = await wait_for_end(
        deps,  # type: ignore[arg-type]
        "t",
        "th",
        RunRef("r1"),
        asyncio.Event(),
        5.0,
        start,
        StoredFeed(list(run.events)),  # type: ignore[arg-type]
    )
    assert ended is not None and contents(ended) == ["one", "two"]

    store.handed_out = 0
    again = await views.load("t", "th")
    assert store.handed_out == 0  # nothing is read twice
    assert again.position == run.position and contents(again) == ["one", "two"]
    await store.append("t", "thread", "th", [said("three")], expected=run.position)
    assert contents(await views.load("t", "th")) == ["one", "two", "three"]
    assert store.handed_out == 1


async def test_a_thread_a_stream_folded_to_its_runs_end_is_read_on_from_there() -> None:
    store = CountingStore()
    views = GraphViews(store)
    created = ThreadCreated(agency_id="ag", agent_type="worker")
    before = await store.append("t", "thread", "th", [created, said("one")], expected=Position())
    run = await store.append(
        "t", "thread", "th", [said("two"), RunCompleted(run_id="r1")], expected=before.position
    )
    # Joined from the log's start, as a stream joined later is.
    feed = StoredFeed([*before.events, *run.events])
    view = GraphView(tenant_id="t", thread_id="th")
    frames = [f async for f in sse(feed, view, RunRef("r1"), ("values",), 0, views)]  # type: ignore[arg-type]
    assert frames

    store.handed_out = 0
    again = await views.load("t", "th")
    assert store.handed_out == 0
    assert again.position == run.position and contents(again) == ["one", "two"]
