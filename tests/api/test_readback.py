"""Read-your-writes waits on notifications: the projector's progress over LISTEN/NOTIFY and
an aggregate's log over a NATS subscription, never by polling while those are up."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.infra.retry import RetryPolicy
from agency.projections.readmodels import events as events_projection
from agency.services.api import logwait
from agency.services.api.logwait import watch_log
from agency.services.api.progress import ProjectionProgress
from tests.api.conftest import STATIC_AGENT, Api, Tenant, Thread, append_messages
from tests.helpers import assert_eventually

NAME = events_projection.PROJECTION.name


@pytest.fixture
async def progress(api: Api) -> AsyncIterator[ProjectionProgress]:
    quick = RetryPolicy(attempts=20, timeout=20.0, wait_initial=0.05, wait_max=0.5)
    listener = ProjectionProgress(api.deps.pool, retry=quick)
    async with listener.listening_while():

        async def listening() -> None:
            assert listener.listening

        await assert_eventually(listening)
        yield listener


async def test_a_waiter_is_woken_when_the_projection_passes_its_event(
    api: Api, progress: ProjectionProgress, thread_a: Thread
) -> None:
    [event] = await append_messages(api.deps.bus, thread_a, "hello")
    assert await progress.wait_passed([NAME], event.stream_seq, timeout=10)
    # Seeded before the event existed, and never read the table again: a notification.
    assert progress.applied(NAME) >= event.stream_seq
    assert progress.table_reads == 0


async def test_the_listener_survives_its_connection_being_killed(
    api: Api, progress: ProjectionProgress, thread_a: Thread
) -> None:
    killed = progress.backend_pid
    assert killed is not None
    admin = await asyncpg.connect(api.database_url, timeout=10)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", killed)
    finally:
        await admin.close(timeout=5)
    # A wait right after the loss completes, by the table or by the listener back.
    [event] = await append_messages(api.deps.bus, thread_a, "after")
    assert await progress.wait_passed([NAME], event.stream_seq, timeout=10)

    async def back() -> None:
        assert progress.listening and progress.connections == 2
        assert progress.backend_pid not in (None, killed)

    await assert_eventually(back, timeout=15)
    # And notifications arrive on the new connection.
    reads = progress.table_reads
    [later] = await append_messages(api.deps.bus, thread_a, "later")
    assert await progress.wait_passed([NAME], later.stream_seq, timeout=10)
    assert progress.table_reads == reads


async def test_without_a_listener_a_wait_reads_the_table(api: Api, thread_a: Thread) -> None:
    idle = ProjectionProgress(api.deps.pool)  # never listens
    [event] = await append_messages(api.deps.bus, thread_a, "unheard")
    assert await idle.wait_passed([NAME], event.stream_seq, timeout=10)
    assert not idle.listening and idle.table_reads >= 1
    # A sequence nobody reaches: the wait ends at its timeout.
    assert not await idle.wait_passed([NAME], event.stream_seq + 10**9, timeout=0.3)


async def test_a_log_wait_is_woken_by_the_event_not_by_reading_again(
    api: Api, thread_a: Thread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logwait, "RECHECK", 60.0)
    bus = api.deps.bus
    tenant, thread_id = thread_a.tenant.id, thread_a.thread_id

    def said_hi(events: list[RecordedEvent]) -> RecordedEvent | None:
        return next((e for e in events if e.type == "message.appended"), None)

    async with watch_log(bus.nc, bus.store, tenant, "thread", thread_id) as log:
        waiting = asyncio.create_task(log.until(said_hi, timeout=10))
        await asyncio.sleep(0)
        assert not waiting.done()
        [appended] = await append_messages(bus, thread_a, "hi")
        found = await asyncio.wait_for(waiting, timeout=10)
    assert found is not None and found.stream_seq == appended.stream_seq


class StoredLate:
    """A log whose awaited event the broker routed (the watch is woken) before it stored it:
    the read after the wake-up finds only what was stored before (`earlier`, possibly
    nothing), a read a little later finds it."""

    def __init__(self, event: RecordedEvent, earlier: list[RecordedEvent]) -> None:
        self.event = event
        self.earlier = earlier
        self.reads = 0

    async def read_positioned(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str, *, after: Position | None
    ) -> tuple[list[RecordedEvent], Position]:
        self.reads += 1
        if self.reads == 2 and self.earlier:
            return self.earlier, self.earlier[-1].position
        if self.reads < 3:
            return [], after or Position()
        return [self.event], self.event.position


@pytest.mark.parametrize("earlier", [0, 1], ids=["nothing-stored-yet", "an-earlier-event"])
async def test_a_wake_up_before_the_event_is_stored_is_read_again_soon(
    api: Api, thread_a: Thread, monkeypatch: pytest.MonkeyPatch, earlier: int
) -> None:
    """No second wake-up comes (the events routed with the first were all before its read),
    and the periodic re-read is an hour away: the wait still ends, by reading again soon,
    whether the read after the wake-up found nothing or only an earlier event."""
    monkeypatch.setattr(logwait, "RECHECK", 3600.0)
    before, appended = await append_messages(api.deps.bus, thread_a, "stored", "late")
    store = StoredLate(appended, [before][:earlier])
    watch = logwait.LogWatch(store, thread_a.tenant.id, "thread", thread_a.thread_id)  # type: ignore[arg-type]

    def found(events: list[RecordedEvent]) -> RecordedEvent | None:
        return next((e for e in events if e is appended), None)

    waiting = asyncio.create_task(watch.until(found, timeout=3600))
    await assert_eventually(lambda: _reads(store, 1))
    watch.wake()
    assert await asyncio.wait_for(waiting, timeout=10) is appended
    assert store.reads == 3


async def _reads(store: StoredLate, count: int) -> None:
    assert store.reads == count


async def test_concurrent_creates_answer_201_and_read_back_at_once(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    r = await client.post("/agencies", json={"name": "many"}, headers=tenant_a.auth)
    assert r.status_code == 201, r.text
    agency_id = r.json()["id"]

    async def create() -> str:
        r = await client.post(
            f"/agency/{agency_id}/agents", json={"agentType": STATIC_AGENT}, headers=tenant_a.auth
        )
        assert r.status_code == 201, r.text
        thread_id = str(r.json()["id"])
        listed = await client.get(f"/agency/{agency_id}/agents", headers=tenant_a.auth)
        assert thread_id in [t["id"] for t in listed.json()]
        return thread_id

    created = await asyncio.gather(*(create() for _ in range(8)))
    listed = (await client.get(f"/agency/{agency_id}/agents", headers=tenant_a.auth)).json()
    assert sorted(t["id"] for t in listed) == sorted(created)


async def test_a_new_tenant_is_answered_once_its_key_is_readable_not_only_the_tenant(
    api: Api, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating a tenant stores two events in one append (the tenant, its first key); the
    projector may take them in two batches, so the answer waits for the second."""
    waited: list[int] = []
    wait_passed = api.deps.progress.wait_passed

    async def recording(
        names: list[str], stream_seq: int, timeout: float, *, partition: int = 0
    ) -> bool:
        waited.append(stream_seq)
        return await wait_passed(names, stream_seq, timeout, partition=partition)

    monkeypatch.setattr(api.deps.progress, "wait_passed", recording)
    r = await client.post("/tenants", json={"name": "two-events"}, headers=api.admin)
    assert r.status_code == 201, r.text
    tenant = r.json()["tenantId"]
    events = await api.deps.bus.store.read(tenant, "tenant", tenant)
    assert [e.type for e in events] == ["tenant.created", "tenant.api_key_issued"]
    assert waited == [events[-1].stream_seq]
    key = {"Authorization": f"Bearer {r.json()['apiKey']}"}
    assert (await client.get("/agencies", headers=key)).status_code == 200
