"""Typed reads of the read models, for the HTTP query routes.

Every function takes the caller's tenant and filters on it: another tenant's agency or
thread is simply not found (`None`), never an error that would confirm it exists. Results
are msgspec structs whose wire names are camelCase.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, get_args

import asyncpg
import msgspec

from agency.contracts.events import BlueprintSpec, ContentPart, ToolCall
from agency.contracts.events.registry import BlueprintConfig, SideConfig, TreeLimits
from agency.contracts.upcasters import stored_blueprint_spec
from agency.projections.rows import fetch_all, from_row


class View(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Base of every answer: camelCase on the wire."""


# --- tenants, agencies, blueprints ---------------------------------------------------


class AgencyView(View, frozen=True, kw_only=True):
    id: str
    name: str
    metadata: dict[str, str]
    created_at: datetime


class StoredBlueprint(View, frozen=True, kw_only=True):
    spec: BlueprintSpec
    revision: int
    updated_at: datetime


BlueprintSource = Literal["static", "dynamic"]


class BlueprintView(View, frozen=True, kw_only=True):
    name: str
    description: str
    prompt: str
    model: str
    tags: tuple[str, ...]
    config: BlueprintConfig
    type: str
    source: BlueprintSource
    revision: int | None = None
    updated_at: datetime | None = None
    title: str = ""
    icon: str = ""
    env: dict[str, str] = {}
    hooks: tuple[str, ...] = ()
    package_name: str = ""
    version: str = ""
    author: str = ""
    license: str = ""
    side_a: SideConfig | None = None
    side_b: SideConfig | None = None
    max_session_turns: int | None = None
    expose_as_tool: bool = False
    tool_description: str = ""
    init_user_message_property: str | None = None
    init_attachments_property: str | None = None
    limits: TreeLimits | None = None
    metadata: dict[str, Any] = {}


async def tenant_for_key(conn: asyncpg.Connection, key_id: str, key_hash: str) -> str | None:
    """The tenant of an unrevoked API key, given its id and the sha256 hex of the whole key."""
    tenant = await conn.fetchval(
        "SELECT tenant_id FROM api_keys WHERE key_id = $1 AND key_hash = $2 AND revoked_at IS NULL",
        key_id,
        key_hash,
    )
    return str(tenant) if tenant is not None else None


def _agency(r: asyncpg.Record) -> AgencyView:
    return AgencyView(
        id=r["agency_id"],
        name=r["name"],
        metadata=msgspec.json.decode(r["metadata"], type=dict[str, str]),
        created_at=r["created_at"],
    )


_AGENCY_COLUMNS = "agency_id, name, metadata::text AS metadata, created_at"


async def list_agencies(conn: asyncpg.Connection, tenant: str) -> list[AgencyView]:
    query = (
        f"SELECT {_AGENCY_COLUMNS} FROM agencies WHERE tenant_id = $1 "
        "ORDER BY created_at, agency_id"
    )
    return await fetch_all(conn, _agency, query, tenant)


async def get_agency(conn: asyncpg.Connection, tenant: str, agency_id: str) -> AgencyView | None:
    row = await conn.fetchrow(
        f"SELECT {_AGENCY_COLUMNS} FROM agencies WHERE tenant_id = $1 AND agency_id = $2",
        tenant,
        agency_id,
    )
    return _agency(row) if row is not None else None


def _stored_blueprint(r: asyncpg.Record) -> StoredBlueprint:
    return StoredBlueprint(
        spec=stored_blueprint_spec(r["spec"]), revision=r["revision"], updated_at=r["updated_at"]
    )


async def list_blueprints(
    conn: asyncpg.Connection, tenant: str, agency_id: str
) -> list[StoredBlueprint]:
    """The agency's dynamic blueprints (saved through the API), by name."""
    query = (
        "SELECT spec::text AS spec, revision, updated_at FROM blueprints "
        "WHERE tenant_id = $1 AND agency_id = $2 ORDER BY name"
    )
    return await fetch_all(conn, _stored_blueprint, query, tenant, agency_id)


async def get_blueprint(
    conn: asyncpg.Connection, tenant: str, agency_id: str, name: str
) -> StoredBlueprint | None:
    row = await conn.fetchrow(
        "SELECT spec::text AS spec, revision, updated_at FROM blueprints "
        "WHERE tenant_id = $1 AND agency_id = $2 AND name = $3",
        tenant,
        agency_id,
        name,
    )
    return _stored_blueprint(row) if row is not None else None


def _blueprint_view(
    spec: BlueprintSpec, source: BlueprintSource, stored: StoredBlueprint | None = None
) -> BlueprintView:
    # The sides are a dual-AI session's; an ai_human blueprint has none to show.
    shown = (
        spec if spec.type == "dual_ai" else msgspec.structs.replace(spec, side_a=None, side_b=None)
    )
    return BlueprintView(
        **msgspec.structs.asdict(shown),
        source=source,
        revision=stored.revision if stored else None,
        updated_at=stored.updated_at if stored else None,
    )


def blueprint_view(
    static: Mapping[str, BlueprintSpec], stored: StoredBlueprint | None, name: str
) -> BlueprintView | None:
    """The agency's dynamic blueprint `name`, else the static one, else None."""
    if stored is not None:
        return _blueprint_view(stored.spec, "dynamic", stored)
    spec = static.get(name)
    return _blueprint_view(spec, "static") if spec is not None else None


def merge_blueprints(
    static: Mapping[str, BlueprintSpec], dynamic: Sequence[StoredBlueprint]
) -> list[BlueprintView]:
    """Static blueprints overridden by the agency's dynamic ones of the same name, by name."""
    merged = {name: _blueprint_view(spec, "static") for name, spec in static.items()}
    for stored in dynamic:
        merged[stored.spec.name] = _blueprint_view(stored.spec, "dynamic", stored)
    return [merged[name] for name in sorted(merged)]


# --- threads and runs ----------------------------------------------------------------

# A thread's status is its current run's, or `terminated` once it was shut down for good.
ThreadStatus = Literal[
    "idle", "registered", "running", "paused", "completed", "canceled", "error", "terminated"
]


class ParentInfo(View, frozen=True, kw_only=True):
    thread_id: str
    token: str
    tool_call_id: str | None = None


class ThreadView(View, frozen=True, kw_only=True):
    id: str
    agency_id: str
    agent_type: str
    model: str
    parent: ParentInfo | None
    correlation_id: str
    created_at: datetime
    updated_at: datetime
    status: ThreadStatus
    current_run_id: str | None
    message_count: int
    run_count: int
    last_seq: int


class RunView(View, frozen=True, kw_only=True):
    run_id: str
    thread_id: str
    status: ThreadStatus
    reason: str | None
    step: int
    max_steps: int
    idempotency_key: str | None
    agent_type: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    result: str | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None


class RunState(View, frozen=True, kw_only=True):
    """The seed's RunState: the thread's current run, or `idle` with no run id."""

    run_id: str | None = None
    status: ThreadStatus = "idle"
    step: int = 0
    reason: str | None = None


_THREAD_COLUMNS = (
    "thread_id, agency_id, agent_type, model, parent_thread_id, parent_token, "
    "parent_tool_call_id, correlation_id, request::text AS request, created_at, updated_at, "
    "status, current_run_id, message_count, run_count, last_seq"
)


def _parent(r: asyncpg.Record) -> ParentInfo | None:
    if r["parent_thread_id"] is None:
        return None
    return ParentInfo(
        thread_id=r["parent_thread_id"],
        token=r["parent_token"] or "",
        tool_call_id=r["parent_tool_call_id"],
    )


def _thread(r: asyncpg.Record) -> ThreadView:
    return from_row(ThreadView, r, id=r["thread_id"], parent=_parent(r))


async def list_threads(conn: asyncpg.Connection, tenant: str, agency_id: str) -> list[ThreadView]:
    query = (
        f"SELECT {_THREAD_COLUMNS} FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
        "ORDER BY created_at, thread_id"
    )
    return await fetch_all(conn, _thread, query, tenant, agency_id)


async def _thread_row(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_THREAD_COLUMNS} FROM threads "
        "WHERE tenant_id = $1 AND thread_id = $2 AND agency_id = $3",
        tenant,
        thread_id,
        agency_id,
    )


class TreeNode(View, frozen=True, kw_only=True):
    id: str
    agent_type: str
    status: ThreadStatus
    current_run_id: str | None
    created_at: datetime
    parent: ParentInfo | None
    children: list[TreeNode]


async def thread_tree(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> TreeNode | None:
    """The thread and every thread below it (its subagents, theirs, …), with statuses."""
    top = await _thread_row(conn, tenant, agency_id, thread_id)
    if top is None:
        return None
    query = "SELECT * FROM threads WHERE tenant_id = $1 AND correlation_id = $2 ORDER BY created_at"
    views = await fetch_all(conn, _thread, query, tenant, top["correlation_id"])
    below: dict[str, list[ThreadView]] = {}
    for view in views:
        if view.parent is not None:
            below.setdefault(view.parent.thread_id, []).append(view)

    def node(view: ThreadView, seen: frozenset[str]) -> TreeNode:
        kids = [k for k in below.get(view.id, []) if k.id not in seen]
        children = [node(k, seen | {k.id}) for k in kids]
        return from_row(TreeNode, msgspec.structs.asdict(view), children=children)

    return node(_thread(top), frozenset({thread_id}))


async def get_thread(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> ThreadView | None:
    row = await _thread_row(conn, tenant, agency_id, thread_id)
    return _thread(row) if row is not None else None


_RUN_COLUMNS = (
    "run_id, thread_id, status, reason, step, max_steps, idempotency_key, agent_type, model, "
    "input_tokens, output_tokens, cost_usd, result, error, created_at, started_at, ended_at"
)


def _run(r: asyncpg.Record) -> RunView:
    values = dict(r)
    values["cost_usd"] = float(values["cost_usd"])
    return RunView(**values)


async def get_run(
    conn: asyncpg.Connection, tenant: str, thread_id: str, run_id: str
) -> RunView | None:
    row = await conn.fetchrow(
        f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = $1 AND thread_id = $2 AND run_id = $3",
        tenant,
        thread_id,
        run_id,
    )
    return _run(row) if row is not None else None


async def list_runs(conn: asyncpg.Connection, tenant: str, thread_id: str) -> list[RunView]:
    query = (
        f"SELECT {_RUN_COLUMNS} FROM runs WHERE tenant_id = $1 AND thread_id = $2 ORDER BY ordinal"
    )
    return await fetch_all(conn, _run, query, tenant, thread_id)


# --- the state of a thread -----------------------------------------------------------


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
    row = await _thread_row(conn, tenant, agency_id, thread_id)
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
    thread = _thread(row)
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


# --- events --------------------------------------------------------------------------


async def event_rows(
    conn: asyncpg.Connection,
    tenant: str,
    thread_id: str,
    from_seq: int,
    limit: int,
    types: list[str] | None = None,
    correlation_id: str | None = None,
) -> tuple[list[tuple[bytes, int]], bool]:
    """A page of stored envelopes as stored, each with its stream sequence, and whether more
    follow.

    Without `correlation_id`: the thread's events from its own `seq` `from_seq` on. With it:
    every event of that subagent tree (root and children), in stream order from stream
    sequence `from_seq` on. `types` keeps only those event types.
    """
    if correlation_id is None:
        scope, position = "aggregate = 'thread' AND aggregate_id = $2 AND seq >= $3", "seq"
        scope_value = thread_id
    else:
        scope, position = "correlation_id = $2 AND stream_seq >= $3", "stream_seq"
        scope_value = correlation_id
    type_filter = "AND type = ANY($5::text[])" if types else ""
    args: list[object] = [tenant, scope_value, from_seq, limit + 1]
    if types:
        args.append(types)
    rows = await conn.fetch(
        f"SELECT envelope::text AS envelope, stream_seq FROM events "
        f"WHERE tenant_id = $1 AND {scope} {type_filter} ORDER BY {position} LIMIT $4",
        *args,
    )
    page = [(r["envelope"].encode(), int(r["stream_seq"])) for r in rows[:limit]]
    return page, len(rows) > limit


# --- usage ---------------------------------------------------------------------------

UsageGroup = Literal["tenant", "agency", "blueprint", "model"]
USAGE_GROUPS: tuple[str, ...] = get_args(UsageGroup)
_GROUP_COLUMNS: dict[str, tuple[str, ...]] = {
    "tenant": (),
    "agency": ("agency_id",),
    "blueprint": ("agency_id", "blueprint"),
    "model": ("model",),
}


class UsageRow(View, frozen=True, kw_only=True):
    """Totals of one group; the keys the grouping does not use are null."""

    agency_id: str | None = None
    blueprint: str | None = None
    model: str | None = None
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


async def usage(conn: asyncpg.Connection, tenant: str, group_by: UsageGroup) -> list[UsageRow]:
    columns = _GROUP_COLUMNS[group_by]
    select = "".join(f"{c}, " for c in columns)
    group = f"GROUP BY {', '.join(columns)} ORDER BY {', '.join(columns)}" if columns else ""
    rows = await conn.fetch(
        f"SELECT {select}coalesce(sum(calls), 0) AS calls, "
        "coalesce(sum(input_tokens), 0) AS input_tokens, "
        "coalesce(sum(output_tokens), 0) AS output_tokens, "
        "coalesce(sum(cost_usd), 0) AS cost_usd "
        f"FROM usage_totals WHERE tenant_id = $1 {group}",
        tenant,
    )
    out = []
    for r in rows:
        cost: Decimal = r["cost_usd"]
        out.append(
            UsageRow(
                agency_id=r.get("agency_id"),
                blueprint=r.get("blueprint"),
                model=r.get("model"),
                calls=int(r["calls"]),
                input_tokens=int(r["input_tokens"]),
                output_tokens=int(r["output_tokens"]),
                cost_usd=float(cost),
            )
        )
    return out


async def tree_threads(
    conn: asyncpg.Connection, tenant: str, thread_id: str
) -> tuple[str, list[str]] | None:
    """The root of the thread's subagent tree and every thread of it; None when the read
    model has no such thread."""
    root = await conn.fetchval(
        "SELECT correlation_id FROM threads WHERE tenant_id = $1 AND thread_id = $2",
        tenant,
        thread_id,
    )
    if root is None:
        return None
    rows = await conn.fetch(
        "SELECT thread_id FROM threads WHERE tenant_id = $1 AND correlation_id = $2",
        tenant,
        root,
    )
    return root, sorted({root, thread_id, *(r["thread_id"] for r in rows)})
