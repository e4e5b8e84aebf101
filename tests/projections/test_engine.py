"""The projection engine against real NATS and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest

from agency.contracts.events import ChatMessage, MessageAppended, RunTick, ThreadCreated
from agency.contracts.ids import new_id
from agency.contracts.subjects import event_subject
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.reader import Delivered, OrderedReader
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.projections import engine, follower
from agency.projections.catalog import by_name
from agency.projections.checksum import projection_checksum
from agency.projections.engine import ProjectionRunner
from agency.projections.positions import advance_positions
from agency.projections.projection import Projection
from agency.projections.rebuild import build_scratch, last_stream_seq, rebuild
from agency.projections.status import projection_statuses
from agency.projections.tenancy import PROJECTOR
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually
from tests.projections.conftest import (
    RunProjection,
    count_event,
    counting_projection,
    counts_projection,
)


async def write_thread(bus: Bus, tenant: str, turns: int) -> str:
    thread = new_id()
    result = await bus.store.append(
        tenant,
        "thread",
        thread,
        [ThreadCreated(agency_id="a", agent_type="x")],
        expected=Position(),
    )
    position = result.position
    for i in range(turns):
        result = await bus.store.append(
            tenant,
            "thread",
            thread,
            [
                MessageAppended(message=ChatMessage(role="user", content=str(i))),
                RunTick(run_id="r", step=i),
            ],
            expected=position,
        )
        position = result.position
    return thread


async def caught_up(runner: ProjectionRunner, bus: Bus) -> None:
    await runner.wait_until(await last_stream_seq(bus.js), timeout=20)


async def test_events_projection_stores_each_event_once_with_its_checkpoint(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    await write_thread(bus, tenant, 5)
    runner = await run_projection(by_name("events"))
    await caught_up(runner, bus)
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT seq, type FROM events WHERE tenant_id = $1 ORDER BY seq", tenant
        )
        checkpoint = await conn.fetchval(
            "SELECT stream_seq FROM agency_projection_checkpoints WHERE name = 'events'"
        )
    assert [r["seq"] for r in rows] == list(range(1, 12))
    assert rows[0]["type"] == "thread.created"
    assert checkpoint == runner.position


async def test_redelivered_events_are_not_applied_twice(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    projection = counting_projection("counts", tenant)
    thread = await write_thread(bus, tenant, 3)
    runner = await run_projection(projection)
    await caught_up(runner, bus)
    events = await bus.store.read(tenant, "thread", thread)

    # A second runner delivers the same events again, as a redelivery or a second projector would.
    second = ProjectionRunner(pool, bus.js, projection, dead_letters=bus.dead_letters)
    await second.commit(events)

    async with pool.acquire() as conn:
        counts = {r["type"]: r["n"] for r in await conn.fetch("SELECT type, n FROM counts")}
    assert counts == {"thread.created": 1, "message.appended": 3, "run.tick": 3}


async def test_projection_resumes_from_its_checkpoint_after_restart(
    bus: Bus, tenant: str, pool: asyncpg.Pool
) -> None:
    projection = counting_projection("counts", tenant)
    for _ in range(2):
        stop = asyncio.Event()
        await write_thread(bus, tenant, 2)
        runner = ProjectionRunner(pool, bus.js, projection, dead_letters=bus.dead_letters)
        task = asyncio.create_task(runner.run(stop))
        await caught_up(runner, bus)
        stop.set()
        await asyncio.wait_for(task, timeout=10)
    async with pool.acquire() as conn:
        counts = {r["type"]: r["n"] for r in await conn.fetch("SELECT type, n FROM counts")}
    assert counts == {"thread.created": 2, "message.appended": 4, "run.tick": 4}


@pytest.mark.parametrize("event_follows", [True, False], ids=["next-event", "quiet-log"])
async def test_commits_the_database_lost_are_applied_again(
    bus: Bus,
    tenant: str,
    pool: asyncpg.Pool,
    run_projection: RunProjection,
    monkeypatch: pytest.MonkeyPatch,
    event_follows: bool,
) -> None:
    """The next batch's commit finds the checkpoint behind; with no event to follow, the
    runner finds it on its own once the log has been quiet a while."""
    if not event_follows:
        monkeypatch.setattr(follower, "STALL_CHECK", 0.5)
    projection = counting_projection("counts", tenant)
    await write_thread(bus, tenant, 2)
    runner = await run_projection(projection)
    await caught_up(runner, bus)
    async with pool.acquire() as conn:
        checkpoint = await conn.fetchval(
            "SELECT stream_seq FROM agency_projection_checkpoints WHERE name = 'counts'"
        )
        before = await conn.fetch("SELECT type, n, last_seq FROM counts")
    await write_thread(bus, tenant, 2)
    await caught_up(runner, bus)
    # The database comes back without the commits since `checkpoint` (a crash without
    # synchronous commit, a failover to a replica that lagged): rows and checkpoint as then.
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM counts")
        await conn.executemany(
            "INSERT INTO counts (type, n, last_seq) VALUES ($1, $2, $3)",
            [(r["type"], r["n"], r["last_seq"]) for r in before],
        )
        await conn.execute(
            "UPDATE agency_projection_checkpoints SET stream_seq = $1 WHERE name = 'counts'",
            checkpoint,
        )
    if event_follows:
        await write_thread(bus, tenant, 1)
    threads, turns = (3, 5) if event_follows else (2, 4)

    async def every_event_counted() -> None:
        async with pool.acquire() as conn:
            rows = await conn.fetch("SELECT type, n FROM counts")
        counts = {r["type"]: r["n"] for r in rows}
        expected = {"thread.created": threads, "message.appended": turns, "run.tick": turns}
        assert counts == expected, counts

    await assert_eventually(every_event_counted, timeout=20)


async def test_a_runner_applies_events_as_the_projector_role(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
        await conn.execute("INSERT INTO appliers SELECT current_user ON CONFLICT DO NOTHING")

    projection = Projection(
        name="appliers",
        tables=("appliers",),
        ddl="CREATE TABLE IF NOT EXISTS appliers (who text PRIMARY KEY)",
        apply=apply,
    )
    await write_thread(bus, tenant, 1)
    runner = await run_projection(projection)
    await caught_up(runner, bus)
    async with pool.acquire() as conn:
        assert [r["who"] for r in await conn.fetch("SELECT who FROM appliers")] == [PROJECTOR]


async def test_a_reader_that_stalls_is_opened_again(
    bus: Bus, tenant: str, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ordered consumer the client failed to recreate after a broker restart delivers
    nothing more: the runner notices events past its position and opens a new reader."""
    opened: list[str] = []

    class FirstOneDeaf(OrderedReader):
        async def next_batch(self, timeout: float = 1.0) -> list[Delivered]:
            if len(opened) == 1:  # the first reader hears nothing
                await asyncio.sleep(timeout)
                return []
            return await super().next_batch(timeout)

        async def open(self) -> None:
            opened.append("reader")
            await super().open()

    monkeypatch.setattr(follower, "OrderedReader", FirstOneDeaf)
    monkeypatch.setattr(follower, "STALL_CHECK", 0.5)
    projection = counting_projection("counts", tenant)
    await write_thread(bus, tenant, 2)
    stop = asyncio.Event()
    runner = ProjectionRunner(pool, bus.js, projection, dead_letters=bus.dead_letters)
    task = asyncio.create_task(runner.run(stop))
    try:
        await caught_up(runner, bus)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=10)
    assert len(opened) >= 2


async def test_rebuild_while_writing_gives_the_same_rows(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    projection = by_name("events")
    for _ in range(3):
        await write_thread(bus, tenant, 20)
    runner = await run_projection(projection)
    await caught_up(runner, bus)
    async with pool.acquire() as conn:
        before = await projection_checksum(conn, projection)

    writing = asyncio.create_task(write_thread(bus, tenant, 30))
    progress: list[tuple[int, int]] = []
    result = await rebuild(pool, bus.js, projection, progress=lambda d, t: progress.append((d, t)))
    await writing
    await caught_up(runner, bus)

    assert result.swapped and progress and progress[-1][0] == progress[-1][1]
    async with pool.acquire() as conn:
        after = await projection_checksum(conn, projection)
        count = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
        scratch = await build_scratch(
            pool, bus.js, projection, "scratch_check", until_seq=runner.position
        )
        fresh = await projection_checksum(conn, projection, scratch.schema)
    assert count == 3 * 41 + 61
    assert after == fresh, "live rows after rebuild differ from a rebuild from sequence 1"
    assert after != before  # the writes during the rebuild are in


async def test_rebuild_of_an_idle_system_is_identical(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    projection = by_name("events")
    await write_thread(bus, tenant, 10)
    runner = await run_projection(projection)
    await caught_up(runner, bus)
    async with pool.acquire() as conn:
        before = await projection_checksum(conn, projection)
    await rebuild(pool, bus.js, projection)
    async with pool.acquire() as conn:
        assert await projection_checksum(conn, projection) == before


async def test_poison_event_is_dead_lettered_and_projection_keeps_going(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    thread = new_id()
    await bus.js.publish(event_subject(tenant, "thread", thread), b"garbage")
    await write_thread(bus, tenant, 1)
    runner = await run_projection(by_name("events"))
    await caught_up(runner, bus)

    async with pool.acquire() as conn:
        stored = await conn.fetchval("SELECT count(*) FROM events WHERE tenant_id = $1", tenant)
    assert stored == 3
    letters = await dead_letters_for(bus, tenant)
    assert [(reason, data) for reason, _, data in letters] == [("undecodable", b"garbage")]


async def test_lag_is_the_distance_between_log_and_checkpoint(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    await write_thread(bus, tenant, 2)
    async with pool.acquire() as conn:
        (idle,) = await projection_statuses(conn, bus.js, ["events"])
    assert idle.status == "not started" and idle.lag == idle.last_seq
    runner = await run_projection(by_name("events"))
    await caught_up(runner, bus)
    async with pool.acquire() as conn:
        (live,) = await projection_statuses(conn, bus.js, ["events"])
    assert live.applied_seq == runner.position
    assert live.lag == live.last_seq - runner.position


def flaky_projection(name: str, tenant: str, failures: list[str]) -> Projection:
    """Counts the tenant's events; the database fails transiently on the first three tries
    of its `thread.created` (a restart, a deadlock, a full disk), and its `poison` message
    fails in the handler's own SQL every time."""
    transient = [
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.DeadlockDetectedError("deadlock detected"),
        asyncpg.DiskFullError("could not extend file: No space left on device"),
    ]

    async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
        for e in events:
            if e.envelope.tenant_id != tenant:
                continue
            if e.type == "thread.created" and len(failures) < len(transient):
                error = transient[len(failures)]
                failures.append(type(error).__name__)
                raise error
            if isinstance(e.payload, MessageAppended) and e.payload.message.content == "poison":
                await conn.execute("SELECT 1 / 0")
            await count_event(conn, e)

    return counts_projection(name, apply)


async def test_transient_database_errors_are_retried_and_a_poison_event_still_dead_lettered(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    thread = new_id()
    await bus.store.append(
        tenant,
        "thread",
        thread,
        [
            ThreadCreated(agency_id="a", agent_type="x"),
            MessageAppended(message=ChatMessage(role="user", content="poison")),
            MessageAppended(message=ChatMessage(role="user", content="fine")),
        ],
        expected=Position(),
    )
    failures: list[str] = []
    runner = await run_projection(flaky_projection("flaky", tenant, failures))
    await caught_up(runner, bus)

    assert failures == ["AdminShutdownError", "DeadlockDetectedError", "DiskFullError"]
    async with pool.acquire() as conn:
        rows = await conn.fetch("SELECT type, n FROM counts ORDER BY type")
    # Applied once each, after the retries; the poison message alone is missing.
    assert [(r["type"], r["n"]) for r in rows] == [("message.appended", 1), ("thread.created", 1)]
    letters = await dead_letters_for(bus, tenant)
    assert len(letters) == 1
    reason, detail, _ = letters[0]
    assert reason == "projection_failed" and "DivisionByZeroError" in detail


async def test_a_hole_in_an_aggregate_s_sequence_is_reported_across_batches(
    bus: Bus, tenant: str, pool: asyncpg.Pool
) -> None:
    """Positions are read and moved in one statement: the second batch is judged against
    where the first one left the aggregate, not against its own upsert."""
    thread = await write_thread(bus, tenant, 3)  # seqs 1..7
    events = await bus.store.read(tenant, "thread", thread)
    projection = counting_projection("gaps_" + new_id().lower(), tenant)
    schema = "gaps_" + new_id().lower()
    async with pool.acquire() as conn:
        await engine.ensure_tables(conn, projection, schema)
        async with conn.transaction():
            await engine.use_schema(conn, schema)
            assert await engine.apply_batch(conn, projection, events[:2]) == []
            across = await engine.apply_batch(conn, projection, events[3:5])
            within = await engine.apply_batch(conn, projection, [events[5], events[6]])
            again = await engine.apply_batch(conn, projection, [events[0]])
    key = f"{tenant}.thread.{thread}"
    assert [(g.aggregate, g.expected_seq, g.got_seq) for g in across] == [(key, 3, 4)]
    assert within == []
    assert [(g.expected_seq, g.got_seq) for g in again] == [(8, 1)]


async def test_projections_moved_in_one_statement_each_judge_the_batch_by_their_own_positions(
    bus: Bus, tenant: str, pool: asyncpg.Pool
) -> None:
    thread = await write_thread(bus, tenant, 3)  # seqs 1..7
    events = await bus.store.read(tenant, "thread", thread)
    ahead, behind = (counting_projection(f"{n}_{new_id().lower()}", tenant) for n in "ab")
    schema = "positions_" + new_id().lower()
    async with pool.acquire() as conn:
        for projection in (ahead, behind):
            await engine.ensure_tables(conn, projection, schema)
        async with conn.transaction():
            await engine.use_schema(conn, schema)
            assert await advance_positions(conn, [ahead], events[:3]) == {ahead.name: []}
            both = await advance_positions(conn, [ahead, behind], [*events[3:5], events[6]])
            again = await advance_positions(conn, [ahead, behind], [events[0]])
    key = f"{tenant}.thread.{thread}"
    found = {
        name: [(g.aggregate, g.expected_seq, g.got_seq) for g in gaps]
        for name, gaps in both.items()
    }
    # The jump inside the batch is every projection's; only `behind` never saw seqs 1..3.
    assert found == {ahead.name: [(key, 6, 7)], behind.name: [(key, 6, 7), (key, 1, 4)]}
    assert {name: [(g.expected_seq, g.got_seq) for g in gaps] for name, gaps in again.items()} == {
        ahead.name: [(8, 1)],
        behind.name: [(8, 1)],
    }


async def test_every_checkpoint_move_is_announced_the_skip_of_a_poison_event_included(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    name = "announced" + new_id().lower()
    announced: list[int] = []

    def heard(_: object, __: int, ___: str, payload: str) -> None:
        who, _sep, seq = payload.rpartition(":")
        if who == name:
            announced.append(int(seq))

    async with pool.acquire() as listener:
        await listener.add_listener(engine.PROGRESS_CHANNEL, heard)
        result = await bus.store.append(
            tenant,
            "thread",
            new_id(),
            [
                ThreadCreated(agency_id="a", agent_type="x"),
                MessageAppended(message=ChatMessage(role="user", content="poison")),
                MessageAppended(message=ChatMessage(role="user", content="fine")),
            ],
            expected=Position(),
        )
        poison = result.events[1].stream_seq
        # No transient failures: the poison message alone fails, every time.
        runner = await run_projection(flaky_projection(name, tenant, ["a", "b", "c"]))
        await caught_up(runner, bus)

        async def heard_all() -> None:
            assert poison in announced
            assert announced[-1] == runner.position
            assert announced == sorted(announced)

        await assert_eventually(heard_all)
        await listener.remove_listener(engine.PROGRESS_CHANNEL, heard)
