"""A code agent's state per thread: the value of its last `agent.state_set`."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
import msgspec

from agency.contracts.events import AgentStateSet
from agency.infra.jetstream.records import RecordedEvent
from agency.projections.projection import Projection

AGENT_STATES_DDL = """
CREATE TABLE IF NOT EXISTS agent_states (
    tenant_id  text        NOT NULL,
    thread_id  text        NOT NULL,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, thread_id)
);
"""

_UPSERT = (
    "INSERT INTO agent_states (tenant_id, thread_id, value, updated_at) "
    "VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (tenant_id, thread_id) DO UPDATE "
    "SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
)


async def apply_agent_states(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
    # Each set replaces the value: only a thread's last one of the batch is written.
    latest: dict[tuple[str, str], tuple[object, ...]] = {}
    for e in events:
        env = e.envelope
        if env.aggregate == "thread" and isinstance(env.payload, AgentStateSet):
            key = (env.tenant_id, env.aggregate_id)
            latest[key] = (*key, msgspec.json.encode(env.payload.value).decode(), env.ts)
    if latest:
        await conn.executemany(_UPSERT, [latest[k] for k in sorted(latest)])


AGENT_STATES = Projection(
    name="agent_states",
    tables=("agent_states",),
    ddl=AGENT_STATES_DDL,
    apply=apply_agent_states,
    handles=frozenset({"agent.state_set"}),
)
