"""`agency projections rebuild --until-seq|--until-time`: read models as they were, in a
scratch schema, the live tables untouched."""

from __future__ import annotations

import os
from pathlib import Path

import asyncpg
import pytest

from agency.contracts.events import ChatMessage, MessageAppended, ThreadCreated
from agency.contracts.ids import new_id
from agency.infra.db import migrate
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from tests.helpers import fresh_database
from tests.replay.conftest import cli


@pytest.fixture
async def database(database_url: str) -> str:
    url = await fresh_database(database_url, "asof")
    conn = await asyncpg.connect(url, timeout=10)
    try:
        await migrate(conn)
    finally:
        await conn.close(timeout=5)
    return url


async def thread_with_messages(bus: Bus, tenant: str, *texts: str) -> list[RecordedEvent]:
    thread = new_id()
    created = await bus.store.append(
        tenant, "thread", thread, [ThreadCreated(agency_id="a1", agent_type="worker")],
        expected=Position(), context=EventContext(agency_id="a1"),
    )  # fmt: skip
    said = await bus.store.append(
        tenant, "thread", thread,
        [MessageAppended(message=ChatMessage(role="user", content=t)) for t in texts],
        expected=created.position, context=EventContext(agency_id="a1"),
    )  # fmt: skip
    return [*created.events, *said.events]


async def test_rebuild_until_a_sequence_shows_the_earlier_state(
    bus: Bus, tenant: str, nats_url: str, database: str, tmp_path: Path
) -> None:
    early = await thread_with_messages(bus, tenant, "one", "two")
    moment = early[-1]
    await thread_with_messages(bus, tenant, "three", "four", "five")
    write_endpoints(tmp_path, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=database))
    d = str(tmp_path)

    ran = await cli(
        "projections", "rebuild", "--until-seq", str(moment.stream_seq), "--data-dir", d
    )
    schema = f"asof_{moment.stream_seq}"
    assert ran.status == 0, ran.err
    assert f"SET search_path TO {schema};" in ran.out
    ran = await cli(
        "projections", "rebuild", "--until-time", moment.envelope.ts.isoformat(), "--data-dir", d
    )
    assert ran.status == 0, ran.err
    by_time = next(line.split()[-1].rstrip(";") for line in ran.lines if "SET search_path" in line)

    conn = await asyncpg.connect(database, timeout=10)
    try:
        for where in (schema, by_time):
            events = await conn.fetchval(
                f'SELECT count(*) FROM "{where}".events WHERE tenant_id = $1', tenant
            )
            threads = await conn.fetchval(
                f'SELECT count(*) FROM "{where}".threads WHERE tenant_id = $1', tenant
            )
            messages = await conn.fetch(
                f'SELECT content FROM "{where}".messages WHERE tenant_id = $1', tenant
            )
            assert (events, threads) == (3, 1)
            assert sorted(r["content"] for r in messages) == ["one", "two"]
        # The live read models were never built or touched.
        assert await conn.fetchval("SELECT to_regclass('public.events')") is None
        leftovers = await conn.fetchval(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'asof%\\_\\_%'"
        )
        assert leftovers == 0
    finally:
        await conn.close(timeout=5)
