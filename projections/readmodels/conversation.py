"""What a thread holds: its messages, todos, files, calls awaiting approval, and children.

Each is a projection of its own so each can be rebuilt alone. Statements run in stream
order, consecutive ones of a kind batched (`projections.statements`).

A thread set back to a past checkpoint (`thread.state_restored`) holds that checkpoint's
messages, files and todos from there on: its rows are replaced by them. The restored
messages take the sequence numbers just below the restoring event's, in order, so the
messages after it follow them (there are fewer of them than events before it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import partial

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    ChatMessage,
    FileWritten,
    HitlInterrupt,
    HitlResume,
    MessageAppended,
    RunCanceled,
    RunCompleted,
    RunError,
    StateRestored,
    SubagentCompleted,
    SubagentSpawned,
    Todo,
    TodosWritten,
)
from agency.projections.statements import Statement, Table, statement_projection
from agency.projections.storable import storable_key

# Every read model here is of threads' events.
_thread_projection = partial(statement_projection, aggregate="thread")


# --- messages --------------------------------------------------------------------------

MESSAGES_DDL = """
CREATE TABLE IF NOT EXISTS messages (
    tenant_id    text        NOT NULL,
    thread_id    text        NOT NULL,
    seq          bigint      NOT NULL,
    run_id       text,
    role         text        NOT NULL,
    content      text        NOT NULL,
    tool_calls   jsonb,
    tool_call_id text,
    name         text,
    created_at   timestamptz NOT NULL,
    parts        jsonb,
    PRIMARY KEY (tenant_id, thread_id, seq)
);
-- A message with images: its whole content, in order (`ChatMessage.parts`).
ALTER TABLE messages ADD COLUMN IF NOT EXISTS parts jsonb;
"""

_MESSAGE = (
    "INSERT INTO messages (tenant_id, thread_id, seq, run_id, role, content, tool_calls, "
    "tool_call_id, name, created_at, parts) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
)


def _message_row(
    env: Envelope, message: ChatMessage, seq: int, run_id: str | None
) -> tuple[object, ...]:
    calls = msgspec.json.encode(message.tool_calls).decode() if message.tool_calls else None
    parts = msgspec.json.encode(message.parts).decode() if message.parts else None
    return (
        env.tenant_id,
        env.aggregate_id,
        seq,
        run_id,
        message.role,
        message.content,
        calls,
        message.tool_call_id,
        message.name,
        env.ts,
        parts,
    )


_MESSAGES_BEFORE = "DELETE FROM messages WHERE tenant_id = $1 AND thread_id = $2 AND seq < $3"


def _message_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case MessageAppended(message=message):
                yield _MESSAGE, _message_row(env, message, env.seq, env.run_id)
            case StateRestored(messages=messages):
                yield _MESSAGES_BEFORE, (env.tenant_id, env.aggregate_id, env.seq)
                first = env.seq - len(messages)
                for i, message in enumerate(messages):
                    yield _MESSAGE, _message_row(env, message, first + i, None)


MESSAGES = _thread_projection(
    "messages", MESSAGES_DDL, _message_statements, {"message.appended", "thread.state_restored"}
)

# --- todos -----------------------------------------------------------------------------

TODOS_DDL = """
CREATE TABLE IF NOT EXISTS todos (
    tenant_id  text        NOT NULL,
    thread_id  text        NOT NULL,
    pos        integer     NOT NULL,
    content    text        NOT NULL,
    status     text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, pos)
);
"""

_TODOS_CLEAR = "DELETE FROM todos WHERE tenant_id = $1 AND thread_id = $2"
_TODOS_INSERT = (
    "INSERT INTO todos (tenant_id, thread_id, pos, content, status, updated_at) "
    "SELECT $1, $2, t.pos, t.content, t.status, $6 "
    "FROM unnest($3::int[], $4::text[], $5::text[]) AS t(pos, content, status)"
)


def _todo_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    # Each write (and each restore) replaces the whole list, so only a thread's last one of
    # the batch counts.
    last: dict[tuple[str, str], tuple[tuple[Todo, ...], datetime]] = {}
    for env in envelopes:
        if isinstance(env.payload, TodosWritten | StateRestored):
            last[(env.tenant_id, env.aggregate_id)] = (env.payload.todos, env.ts)
    for (tenant, thread), (todos, ts) in sorted(last.items()):
        yield _TODOS_CLEAR, (tenant, thread)
        if todos:
            yield (
                _TODOS_INSERT,
                (
                    tenant,
                    thread,
                    list(range(len(todos))),
                    [t.content for t in todos],
                    [t.status for t in todos],
                    ts,
                ),
            )


TODOS = _thread_projection(
    "todos", TODOS_DDL, _todo_statements, {"todos.written", "thread.state_restored"}
)

# --- files -----------------------------------------------------------------------------

FILE_TABLE = Table(
    "files",
    {
        "tenant_id": "text NOT NULL",
        "thread_id": "text NOT NULL",
        "path": "text NOT NULL",
        "content": "text NOT NULL",
        "updated_at": "timestamptz NOT NULL",
    },
    ("tenant_id", "thread_id", "path"),
)
_FILE = FILE_TABLE.upsert
_FILES_CLEAR = FILE_TABLE.delete("tenant_id", "thread_id")


def _file_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    # The latest write of a path wins: keep only it, so no row is written twice. A restore
    # replaces the thread's files: the writes before it are written first.
    latest: dict[tuple[str, str, str], tuple[object, ...]] = {}
    for env in envelopes:
        match env.payload:
            case FileWritten(path=path, content=content):
                key = (env.tenant_id, env.aggregate_id, storable_key(path))
                latest[key] = (*key, content, env.ts)
            case StateRestored(files=files):
                yield from ((_FILE, latest[key]) for key in sorted(latest))
                latest.clear()
                tenant, thread = env.tenant_id, env.aggregate_id
                yield _FILES_CLEAR, (tenant, thread)
                for path, content in sorted(files.items()):
                    yield _FILE, (tenant, thread, storable_key(path), content, env.ts)
    for key in sorted(latest):
        yield _FILE, latest[key]


FILES = _thread_projection(
    "files", FILE_TABLE.ddl, _file_statements, {"file.written", "thread.state_restored"}
)

# --- tool calls awaiting a person ------------------------------------------------------

PENDING_DDL = """
CREATE TABLE IF NOT EXISTS pending_tool_calls (
    tenant_id    text        NOT NULL,
    thread_id    text        NOT NULL,
    run_id       text        NOT NULL,
    pos          integer     NOT NULL,
    tool_call_id text        NOT NULL,
    name         text        NOT NULL,
    arguments    text        NOT NULL,
    requested_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, thread_id, run_id, pos)
);
"""

_PENDING_CLEAR = (
    "DELETE FROM pending_tool_calls WHERE tenant_id = $1 AND thread_id = $2 AND run_id = $3"
)
_PENDING_INSERT = (
    "INSERT INTO pending_tool_calls (tenant_id, thread_id, run_id, pos, tool_call_id, name, "
    "arguments, requested_at) SELECT $1, $2, $3, c.pos, c.id, c.name, c.arguments, $7 "
    "FROM unnest($4::text[], $5::text[], $6::text[]) WITH ORDINALITY "
    "AS c(id, name, arguments, pos)"
)


def _pending_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    # Mirrors the runtime: an interrupt sets the run's pending calls; a resume or the end of
    # the run clears them.
    for env in envelopes:
        run = (env.tenant_id, env.aggregate_id)
        match env.payload:
            case HitlInterrupt(run_id=run_id, proposed_tool_calls=calls):
                yield _PENDING_CLEAR, (*run, run_id)
                if calls:
                    yield (
                        _PENDING_INSERT,
                        (
                            *run,
                            run_id,
                            [c.id for c in calls],
                            [c.name for c in calls],
                            [c.arguments for c in calls],
                            env.ts,
                        ),
                    )
            case (
                HitlResume(run_id=run_id)
                | RunCompleted(run_id=run_id)
                | RunError(run_id=run_id)
                | RunCanceled(run_id=run_id)
            ):
                yield _PENDING_CLEAR, (*run, run_id)


PENDING_TOOL_CALLS = _thread_projection(
    "pending_tool_calls",
    PENDING_DDL,
    _pending_statements,
    {"hitl.interrupt", "hitl.resume", "run.completed", "run.error", "run.canceled"},
)

# --- subagent links --------------------------------------------------------------------

SUBAGENTS_DDL = """
CREATE TABLE IF NOT EXISTS subagent_links (
    tenant_id       text        NOT NULL,
    thread_id       text        NOT NULL,
    child_thread_id text        NOT NULL,
    run_id          text        NOT NULL,
    tool_call_id    text        NOT NULL,
    token           text        NOT NULL,
    subagent_type   text        NOT NULL,
    status          text        NOT NULL,
    outcome         text,
    report          text,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    PRIMARY KEY (tenant_id, thread_id, child_thread_id)
);
"""

# A respawn (a resumed child) waits again; its link keeps the first spawn's time.
_SPAWNED = (
    "INSERT INTO subagent_links (tenant_id, thread_id, child_thread_id, run_id, tool_call_id, "
    "token, subagent_type, status, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'waiting', $8) "
    "ON CONFLICT (tenant_id, thread_id, child_thread_id) DO UPDATE SET run_id = EXCLUDED.run_id, "
    "tool_call_id = EXCLUDED.tool_call_id, token = EXCLUDED.token, "
    "subagent_type = EXCLUDED.subagent_type, status = 'waiting', outcome = NULL, report = NULL, "
    "completed_at = NULL"
)
_COMPLETED = (
    "INSERT INTO subagent_links (tenant_id, thread_id, child_thread_id, run_id, tool_call_id, "
    "token, subagent_type, status, outcome, report, created_at, completed_at) "
    "VALUES ($1, $2, $3, $4, $5, '', '', $6, $7, $8, $9, $9) "
    "ON CONFLICT (tenant_id, thread_id, child_thread_id) DO UPDATE SET status = EXCLUDED.status, "
    "outcome = EXCLUDED.outcome, report = EXCLUDED.report, completed_at = EXCLUDED.completed_at"
)

# The seed's link states are waiting, completed and canceled; the exact outcome is kept too.
LINK_STATUS = {"completed": "completed", "error": "completed", "canceled": "canceled"}


def _subagent_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        parent = (env.tenant_id, env.aggregate_id)
        match env.payload:
            case SubagentSpawned() as s:
                yield (
                    _SPAWNED,
                    (
                        *parent,
                        s.child_thread_id,
                        s.run_id,
                        s.tool_call_id,
                        s.token,
                        s.subagent_type,
                        env.ts,
                    ),
                )
            case SubagentCompleted() as c:
                status = LINK_STATUS.get(c.outcome, "canceled")
                yield (
                    _COMPLETED,
                    (
                        *parent,
                        c.child_thread_id,
                        c.run_id,
                        c.tool_call_id,
                        status,
                        c.outcome,
                        c.report,
                        env.ts,
                    ),
                )


SUBAGENT_LINKS = _thread_projection(
    "subagent_links",
    SUBAGENTS_DDL,
    _subagent_statements,
    {"subagent.spawned", "subagent.completed"},
)
