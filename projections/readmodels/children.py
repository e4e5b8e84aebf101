"""A parent's child registry (the seed's `ThreadState.children`): one row per child, with
the same rules as the runtime's fold (`domain.thread_children.ChildEntry`).

`state` is where the child is: `running`, its last outcome, or `terminated`, which no later
event changes. `status_text` is what the child last said about itself (a session status
tool or `set_status`), cleared when its state changes; `/state` shows the text while there
is one, else the state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    SubagentCompleted,
    SubagentMessaged,
    SubagentSpawned,
    SubagentStatus,
    SubagentTerminated,
)
from agency.projections.statements import Statement, statement_projection

DDL = """
CREATE TABLE IF NOT EXISTS child_registry (
    tenant_id            text        NOT NULL,
    thread_id            text        NOT NULL,
    reference            text        NOT NULL,
    name                 text        NOT NULL,
    title                text,
    description          text        NOT NULL,
    subagent_type        text        NOT NULL,
    resumable            boolean     NOT NULL,
    blocking             boolean     NOT NULL,
    thread_name          text,
    spawn_group_id       text,
    parent_communication text        NOT NULL,
    state                text        NOT NULL,
    status_text          text        NOT NULL,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, reference)
);
"""

# A child is entered once; a respawn (a fork's copy of the link) keeps the first entry.
_SPAWNED = (
    "INSERT INTO child_registry (tenant_id, thread_id, reference, name, title, description, "
    "subagent_type, resumable, blocking, thread_name, spawn_group_id, parent_communication, "
    "state, status_text, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
    "$10, $11, $12, 'running', '', $13, $13) "
    "ON CONFLICT (tenant_id, thread_id, reference) DO NOTHING"
)
_STATE = (
    "UPDATE child_registry SET state = $4, status_text = '', updated_at = $5 "
    "WHERE tenant_id = $1 AND thread_id = $2 AND reference = $3 AND state <> 'terminated'"
)
_TEXT = (
    "UPDATE child_registry SET status_text = $4, updated_at = $5 "
    "WHERE tenant_id = $1 AND thread_id = $2 AND reference = $3 AND state <> 'terminated'"
)
_TERMINATED = (
    "UPDATE child_registry SET state = 'terminated', status_text = '', updated_at = $4 "
    "WHERE tenant_id = $1 AND thread_id = $2 AND reference = $3"
)


def _statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        parent = (env.tenant_id, env.aggregate_id)
        match env.payload:
            case SubagentSpawned() as s:
                yield (
                    _SPAWNED,
                    (
                        *parent,
                        s.child_thread_id,
                        s.name or s.subagent_type,
                        s.title,
                        s.description,
                        s.subagent_type,
                        s.resumable,
                        s.blocking,
                        s.thread_name,
                        s.spawn_group_id,
                        s.parent_communication,
                        env.ts,
                    ),
                )
            case SubagentMessaged(child_thread_id=child):
                yield _STATE, (*parent, child, "running", env.ts)
            case SubagentCompleted(child_thread_id=child, outcome=outcome):
                yield _STATE, (*parent, child, outcome, env.ts)
            case SubagentStatus(child_thread_id=child, status=status):
                yield _TEXT, (*parent, child, status, env.ts)
            case SubagentTerminated(child_thread_id=child):
                yield _TERMINATED, (*parent, child, env.ts)


_HANDLES = {
    "subagent.spawned",
    "subagent.messaged",
    "subagent.completed",
    "subagent.status",
    "subagent.terminated",
}
PROJECTION = statement_projection("child_registry", DDL, _statements, _HANDLES, aggregate="thread")
