"""The LangGraph views kept folded: a load reads on from the view kept, and every caller
gets a view of its own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from agency.contracts.events import ChatMessage, MessageAppended, ThreadCreated
from agency.infra.jetstream.records import Position
from agency.services.api.langgraph.graphstate import GraphView, fold_view
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
