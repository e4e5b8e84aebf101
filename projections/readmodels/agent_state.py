"""A code agent's state per thread: the value of its last `agent.state_set`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import AgentStateSet
from agency.projections.statements import Statement, statement_projection

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


def _statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    # Each set replaces the value: only a thread's last one of the batch is written.
    latest: dict[tuple[str, str], tuple[object, ...]] = {}
    for env in envelopes:
        if isinstance(env.payload, AgentStateSet):
            key = (env.tenant_id, env.aggregate_id)
            latest[key] = (*key, msgspec.json.encode(env.payload.value).decode(), env.ts)
    for key in sorted(latest):
        yield _UPSERT, latest[key]


AGENT_STATES = statement_projection(
    "agent_states", AGENT_STATES_DDL, _statements, {"agent.state_set"}, aggregate="thread"
)
