"""A run's end reads its thread's events since the run's request, not the thread's history:
the webhook sender and the deleter of threads on their run's end (`run_end.py`), on a
thread of many runs, each ask the log for about one run's events.

The runs' events are appended here and no runtime is up (none runs in this package), so
what the log is asked for about the thread is what the handlers asked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg
import pytest
from nats.aio.msg import Msg

from agency.contracts.events import (
    AnyEvent,
    MessageAppended,
    RequestAccepted,
    RunCompleted,
    RunStarted,
    ThreadCreated,
)
from agency.contracts.events.base import ChatMessage
from agency.contracts.ids import new_id
from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.projections.setup import prepare_read_models
from agency.services.threads.erasure import deletion_of
from agency.services.threads.run_end import DeleteOnRunEnd, requested_by
from agency.services.webhooks.service import Webhooks
from tests.helpers import fresh_database
from tests.protocols.webhooks.receiver import read_request

RUNS = 40
# A run's events: its request, its start, three messages and its end.
PER_RUN = 6


def run_events(run_id: str, *, webhook: str | None = None, delete: bool = False) -> list[AnyEvent]:
    said = [
        MessageAppended(run_id=run_id, message=ChatMessage(role="user", content=f"{run_id} {i}"))
        for i in range(3)
    ]
    return [
        RequestAccepted(
            run_id=run_id,
            idempotency_key="k-" + run_id,
            webhook=webhook,
            delete_thread_on_end=delete,
        ),
        RunStarted(run_id=run_id, agent_type="worker", max_steps=5),
        *said,
        RunCompleted(run_id=run_id, result="done"),
    ]


@dataclass
class Thread:
    id: str
    ends: list[RecordedEvent]
    run_ids: list[str]


async def thread_of_runs(bus: Bus, tenant: str, last: list[AnyEvent] | None = None) -> Thread:
    """A thread of `RUNS` runs, with other threads' events between them; the last run's
    events `last` when given."""
    thread = new_id()
    created = ThreadCreated(agency_id="a-" + tenant, agent_type="worker")
    done = await bus.store.append(tenant, "thread", thread, [created], expected=Position())
    position, ends, run_ids = done.position, [], []
    for i in range(RUNS):
        run_id = new_id()
        events = run_events(run_id) if i < RUNS - 1 or last is None else last
        run_id = getattr(events[0], "run_id", run_id)
        done = await bus.store.append(tenant, "thread", thread, events, expected=position)
        position = done.position
        ends.append(done.events[-1])
        run_ids.append(run_id)
        other = [
            MessageAppended(message=ChatMessage(role="user", content=str(n))) for n in range(7)
        ]
        await bus.store.append(tenant, "thread", new_id(), other, expected=Position())
    return Thread(thread, ends, run_ids)


@asynccontextmanager
async def asked_of(bus: Bus, tenant: str, thread: str) -> AsyncIterator[list[int]]:
    """How many of the thread's messages each direct get on the stream's request subject
    asked for while the block runs (every read of its events goes there; the tombstone's
    check of the last message asks on the subject-suffixed one)."""
    subject = bus.store.subject(tenant, "thread", thread)
    asked: list[int] = []

    async def record(msg: Msg) -> None:
        request = json.loads(msg.data)
        if request.get("next_by_subj") == subject:
            asked.append(int(request.get("batch", 1)))
        elif subject in (request.get("last_by_subj"), *request.get("multi_last", ())):
            asked.append(1)

    sub = await bus.nc.subscribe(f"$JS.API.DIRECT.GET.{bus.store.stream_of(thread)}", cb=record)
    try:
        yield asked
    finally:
        await bus.nc.flush()
        await sub.unsubscribe()


@asynccontextmanager
async def posts_received() -> AsyncIterator[tuple[str, asyncio.Queue[bytes]]]:
    """A receiver of runs' webhooks on loopback: its URL, and the bodies POSTed to it."""
    bodies: asyncio.Queue[bytes] = asyncio.Queue()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        await bodies.put(body)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook", bodies


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    """The read models of an empty database: the deleter finds the thread's tree there."""
    created = await create_pool(await fresh_database(database_url, "runend"), max_size=2)
    try:
        async with created.acquire() as conn:
            await migrate(conn)
        await prepare_read_models(created)
        yield created
    finally:
        await asyncio.wait_for(created.close(), timeout=10)


async def test_a_runs_webhook_is_posted_reading_the_events_since_its_request(
    bus: Bus, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_WEBHOOK_SECRET", "whsec-test")
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    async with posts_received() as (url, bodies):
        last = run_events(new_id(), webhook=url)
        thread = await thread_of_runs(bus, tenant, last)
        hooks = Webhooks(bus)
        async with asked_of(bus, tenant, thread.id) as asked:
            await hooks.handle(thread.ends[-1])
        async with asyncio.timeout(10):
            sent = json.loads(await bodies.get())
        await hooks.handle(thread.ends[-2])  # a run that named no webhook: nothing POSTed
    assert bodies.empty()
    assert sent["run_id"] == thread.run_ids[-1] and sent["thread_id"] == thread.id
    assert sent["status"] == "success" and sent["assistant_id"] == "worker"
    # About the run's own events (and the thread's first), never the thread's 241.
    assert sum(asked) <= 2 * PER_RUN + 2, asked


async def test_a_thread_deleted_at_its_runs_end_reads_the_events_since_its_request(
    bus: Bus, tenant: str, pool: asyncpg.Pool
) -> None:
    run_id = new_id()
    thread = await thread_of_runs(bus, tenant, run_events(run_id, delete=True))
    deleter = DeleteOnRunEnd(bus, pool)
    async with asked_of(bus, tenant, thread.id) as asked:
        await deleter.handle(thread.ends[-2])  # its request kept the thread
        assert await deletion_of(bus, tenant, thread.id) is None
        await deleter.handle(thread.ends[-1])
    deleted = await deletion_of(bus, tenant, thread.id)
    assert deleted is not None and deleted.requested_by == requested_by(run_id)
    # Two run ends, each about the events of its run (and the tombstone's own reads).
    assert sum(asked) <= 4 * PER_RUN + 6, asked
