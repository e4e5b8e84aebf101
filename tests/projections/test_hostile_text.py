"""Text PostgreSQL cannot hold (NUL) and keys it cannot index (a 10,000-character path)
reach the log from models and tools; every projection stores them safely, none skips."""

from __future__ import annotations

import secrets

import asyncpg
import pytest

from agency.contracts.events import (
    ChatMessage,
    FileWritten,
    MessageAppended,
    ModelCompleted,
    RunStarted,
    ThreadCreated,
    ToolCall,
    ToolOutput,
)
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.projections import state_queries
from agency.projections.engine import CHECKPOINTS
from agency.projections.storable import storable, storable_key
from tests.deadletters import dead_letters_for
from tests.projections.conftest import RunProjection
from tests.projections.test_readmodels import Log, caught_up, read_from_here, start_all


async def test_nul_and_a_huge_path_are_projected_without_a_skip(
    bus: Bus, tenant: str, pool: asyncpg.Pool, run_projection: RunProjection
) -> None:
    await read_from_here(bus, pool)
    log, thread = Log(bus, tenant), new_id()
    huge_path = "dir/" + secrets.token_hex(5000)  # 10,004 characters that do not compress
    call = ToolCall(id="c1", name="lookup", arguments='{"q": "a\\u0000b"}')
    await log.add(
        "thread", thread,
        ThreadCreated(agency_id="ag", agent_type="helper"),
        RunStarted(run_id="r1", agent_type="helper", max_steps=5),
        MessageAppended(run_id="r1", message=ChatMessage(role="user", content="hi\x00there")),
        ModelCompleted(run_id="r1", step=1, model="m\x00",
                       message=ChatMessage(role="assistant", tool_calls=(call,))),
        MessageAppended(run_id="r1", message=ChatMessage(role="assistant", tool_calls=(call,))),
        ToolOutput(run_id="r1", tool_call_id="c1", tool_name="lookup", output="\x00bin\x00"),
        FileWritten(run_id="r1", path="a\x00.md", content="x\x00y"),
        FileWritten(run_id="r1", path=huge_path, content="long"),
        agency="ag",
    )  # fmt: skip

    runners = await start_all(run_projection)
    await caught_up(runners, bus)

    async with pool.acquire() as conn:
        statuses = await conn.fetch(f"SELECT name, status, error FROM {CHECKPOINTS}")
        view = await state_queries.thread_state(conn, tenant, "ag", thread)
        stored = await conn.fetchval(
            "SELECT count(*) FROM events WHERE tenant_id = $1 AND aggregate_id = $2", tenant, thread
        )
    assert all(r["status"] == "running" for r in statuses), [dict(r) for r in statuses]
    assert await dead_letters_for(bus, tenant) == []
    assert stored == 8
    assert view is not None
    assert view.state.messages[0].content == "hi\ufffdthere"
    assert view.state.files["a\ufffd.md"] == "x\ufffdy"
    assert view.state.files[storable_key(huge_path)] == "long"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(rb'"a\u0000b"', rb'"a\ufffdb"', id="escape"),
        pytest.param(rb'"a\\u0000b"', rb'"a\\u0000b"', id="escaped-backslash-is-text"),
        pytest.param(rb'"a\\\u0000b"', rb'"a\\\ufffdb"', id="backslash-then-escape"),
    ],
)
def test_only_real_nul_escapes_are_replaced(raw: bytes, expected: bytes) -> None:
    from agency.contracts.codec import encode
    from agency.contracts.envelope import Envelope, utc_now
    from agency.infra.jetstream.records import RecordedEvent

    event = Envelope(
        event_id="e", tenant_id="t", aggregate="thread", aggregate_id="th", seq=1, ts=utc_now(),
        type="tool.output", version=1,
        payload=ToolOutput(run_id="r", tool_call_id="c", tool_name="n", output="PLACEHOLDER"),
    )  # fmt: skip
    data = encode(event).replace(b'"PLACEHOLDER"', raw)
    recorded = RecordedEvent(envelope=event, stream_seq=1, subject="s", raw=data)
    assert storable(recorded).raw == data.replace(raw, expected)
