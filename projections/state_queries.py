"""The state of a thread as `/state` shows it, read from the read models in one snapshot.

Every function takes the caller's tenant and filters on it (`projections.queries`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import asyncpg
import msgspec

from agency.contracts.events import ContentPart, ToolCall
from agency.projections.queries import ParentInfo, ThreadStatus, View, thread_row, thread_view
from agency.projections.rows import from_row


class RunState(View, frozen=True, kw_only=True):
    """The seed's RunState: the thread's current run, or `idle` with no run id."""

    run_id: str | None = None
    status: ThreadStatus = "idle"
    step: int = 0
    reason: str | None = None


class ToolCallView(View, frozen=True, kw_only=True):
    """The seed's ToolCall: `args` is the parsed JSON the model produced (the raw text if
    it is not valid JSON)."""

    id: str
    name: str
    args: Any


class PartView(View, frozen=True, kw_only=True, omit_defaults=True):
    """One part of a message with images, as the client sent it (`ContentPart`): `text`,
    or an image by `url` (`image_url`, `image`) or inline (`base64`, or `data` with
    `sourceType`, and its `mimeType`)."""

    type: str
    text: str = ""
    url: str = ""
    detail: str = ""
    base64: str = ""
    data: str = ""
    source_type: str = ""
    mime_type: str = ""


class MessageView(View, frozen=True, kw_only=True, omit_defaults=True):
    """The seed's ChatMessage: absent fields are left out, as in its union type. A message
    with images has `parts`, its whole content in order; `content` is then its text."""

    role: str
    content: str
    tool_calls: list[ToolCallView] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    parts: list[PartView] | None = None


class TodoView(View, frozen=True, kw_only=True):
    content: str
    status: str


class ToolMeta(View, frozen=True, kw_only=True):
    name: str
    description: str
    parameters: dict[str, Any]


class ThreadMetadata(View, frozen=True, kw_only=True):
    id: str
    agency_id: str
    agent_type: str
    created_at: datetime
    request: dict[str, str]
    parent: ParentInfo | None
    status: ThreadStatus = "idle"


class SubagentLink(View, frozen=True, kw_only=True):
    """The seed's SubagentLink; times are epoch milliseconds, as there."""

    child_thread_id: str
    token: str
    status: str
    created_at: int
    completed_at: int | None
    report: str | None
    tool_call_id: str | None
    subagent_type: str
    outcome: str | None


class ChildRegistryEntry(View, frozen=True, kw_only=True):
    """The seed's SubagentRegistryEntry: a child in its parent's registry. `createdAt` is
    epoch milliseconds; `status` is the child's last status text while it has one, else
    its `state` (`running`, `completed`, `error`, `canceled`, `timeout`, `terminated`)."""

    reference: str
    name: str
    title: str | None
    description: str
    resumable: bool
    blocking: bool
    thread_name: str | None
    spawn_group_id: str | None
    created_at: int
    status: str
    parent_communication: Literal["implicit", "explicit"]
    subagent_type: str
    state: str


def _child(r: asyncpg.Record) -> ChildRegistryEntry:
    return from_row(
        ChildRegistryEntry,
        r,
        created_at=round(r["created_at"].timestamp() * 1000),
        status=r["status_text"] or r["state"],
    )


class AgentState(View, frozen=True, kw_only=True):
    messages: list[MessageView]
    tools: list[ToolMeta]
    thread: ThreadMetadata
    thread_id: str
    parent: ParentInfo | None
    agent_type: str
    model: str
    todos: list[TodoView]
    files: dict[str, str]
    pending_tool_calls: list[ToolCallView]
    subagents: list[SubagentLink]
    # The child registry (the seed's ThreadState.children), in the order children came.
    children: list[ChildRegistryEntry] = []
    # A code agent's state (`ctx.set_state`); null for a thread that never set one.
    agent_state: Any = None


class ThreadStateView(View, frozen=True, kw_only=True):
    """What `/state` answers: `{state, run}`. `state.tools` is filled by the caller, which
    knows the agent system."""

    state: AgentState
    run: RunState


_tool_calls_decoder = msgspec.json.Decoder(tuple[ToolCall, ...])
_parts_decoder = msgspec.json.Decoder(tuple[ContentPart, ...])


def parse_args(arguments: str) -> Any:
    try:
        return msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return arguments


def _call_view(call_id: str, name: str, arguments: str) -> ToolCallView:
    return ToolCallView(id=call_id, name=name, args=parse_args(arguments))


def _message(r: asyncpg.Record) -> MessageView:
    calls = None
    if r["tool_calls"] is not None:
        calls = [
            _call_view(c.id, c.name, c.arguments)
            for c in _tool_calls_decoder.decode(r["tool_calls"])
        ]
    parts = None
    if r["parts"] is not None:
        parts = [PartView(**msgspec.structs.asdict(p)) for p in _parts_decoder.decode(r["parts"])]
    return MessageView(
        role=r["role"],
        content=r["content"],
        tool_calls=calls or None,
        tool_call_id=r["tool_call_id"],
        name=r["name"],
        parts=parts,
    )


def _epoch_ms(value: datetime | None) -> int | None:
    return round(value.timestamp() * 1000) if value is not None else None


def _link(r: asyncpg.Record) -> SubagentLink:
    return from_row(
        SubagentLink,
        r,
        created_at=round(r["created_at"].timestamp() * 1000),
        completed_at=_epoch_ms(r["completed_at"]),
        tool_call_id=r["tool_call_id"] or None,
    )


async def _run_state(conn: asyncpg.Connection, tenant: str, thread: asyncpg.Record) -> RunState:
    run_id = thread["current_run_id"]
    if run_id is None:
        return RunState()
    row = await conn.fetchrow(
        "SELECT status, step, reason FROM runs "
        "WHERE tenant_id = $1 AND thread_id = $2 AND run_id = $3",
        tenant,
        thread["thread_id"],
        run_id,
    )
    if row is None:
        return RunState(run_id=run_id, status=thread["status"])
    return RunState(run_id=run_id, status=row["status"], step=row["step"], reason=row["reason"])


async def thread_state(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> ThreadStateView | None:
    """The thread as `/state` shows it, read in one snapshot; `None` if it is not the
    tenant's thread in that agency."""
    if conn.is_in_transaction():
        return await _thread_state(conn, tenant, agency_id, thread_id)
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        return await _thread_state(conn, tenant, agency_id, thread_id)


async def _thread_state(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> ThreadStateView | None:
    row = await thread_row(conn, tenant, agency_id, thread_id)
    if row is None:
        return None
    key = (tenant, thread_id)
    where = "WHERE tenant_id = $1 AND thread_id = $2"
    messages = await conn.fetch(
        "SELECT role, content, tool_calls::text AS tool_calls, tool_call_id, name, "
        f"parts::text AS parts FROM messages {where} ORDER BY seq",
        *key,
    )
    todos = await conn.fetch(f"SELECT content, status FROM todos {where} ORDER BY pos", *key)
    files = await conn.fetch(f"SELECT path, content FROM files {where} ORDER BY path", *key)
    pending = await conn.fetch(
        f"SELECT tool_call_id, name, arguments FROM pending_tool_calls {where} "
        "ORDER BY requested_at, run_id, pos",
        *key,
    )
    links = await conn.fetch(
        f"SELECT * FROM subagent_links {where} ORDER BY created_at, child_thread_id", *key
    )
    registry = await conn.fetch(
        f"SELECT * FROM child_registry {where} ORDER BY created_at, reference", *key
    )
    agent_state = await conn.fetchval(f"SELECT value::text FROM agent_states {where}", *key)
    thread = thread_view(row)
    request = msgspec.json.decode(row["request"], type=dict[str, str])
    state = AgentState(
        messages=[_message(m) for m in messages],
        tools=[],
        thread=from_row(ThreadMetadata, msgspec.structs.asdict(thread), request=request),
        thread_id=thread.id,
        parent=thread.parent,
        agent_type=thread.agent_type,
        model=thread.model,
        todos=[from_row(TodoView, t) for t in todos],
        files={f["path"]: f["content"] for f in files},
        pending_tool_calls=[
            _call_view(p["tool_call_id"], p["name"], p["arguments"]) for p in pending
        ],
        subagents=[_link(r) for r in links],
        children=[_child(r) for r in registry],
        agent_state=msgspec.json.decode(agent_state) if agent_state is not None else None,
    )
    return ThreadStateView(state=state, run=await _run_state(conn, tenant, row))
