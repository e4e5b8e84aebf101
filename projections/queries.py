"""Typed reads of the read models, for the HTTP query routes.

Every function takes the caller's tenant and filters on it: another tenant's agency or
thread is simply not found (`None`), never an error that would confirm it exists. Results
are msgspec structs whose wire names are camelCase. The agencies and blueprints are read in
`agency_queries`, the state of a thread in `state_queries`.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal, get_args

import asyncpg
import msgspec

from agency.projections.rows import fetch_all, from_row


class View(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Base of every answer: camelCase on the wire."""


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


def thread_view(r: asyncpg.Record) -> ThreadView:
    """A row of `thread_row`'s columns as the thread's view."""
    return from_row(ThreadView, r, id=r["thread_id"], parent=_parent(r))


async def list_threads(conn: asyncpg.Connection, tenant: str, agency_id: str) -> list[ThreadView]:
    query = (
        f"SELECT {_THREAD_COLUMNS} FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
        "ORDER BY created_at, thread_id"
    )
    return await fetch_all(conn, thread_view, query, tenant, agency_id)


async def thread_row(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> asyncpg.Record | None:
    """The tenant's thread in that agency, as its read-model row; None if there is none."""
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
    top = await thread_row(conn, tenant, agency_id, thread_id)
    if top is None:
        return None
    query = "SELECT * FROM threads WHERE tenant_id = $1 AND correlation_id = $2 ORDER BY created_at"
    views = await fetch_all(conn, thread_view, query, tenant, top["correlation_id"])
    below: dict[str, list[ThreadView]] = {}
    for view in views:
        if view.parent is not None:
            below.setdefault(view.parent.thread_id, []).append(view)

    def node(view: ThreadView, seen: frozenset[str]) -> TreeNode:
        kids = [k for k in below.get(view.id, []) if k.id not in seen]
        children = [node(k, seen | {k.id}) for k in kids]
        return from_row(TreeNode, msgspec.structs.asdict(view), children=children)

    return node(thread_view(top), frozenset({thread_id}))


async def get_thread(
    conn: asyncpg.Connection, tenant: str, agency_id: str, thread_id: str
) -> ThreadView | None:
    row = await thread_row(conn, tenant, agency_id, thread_id)
    return thread_view(row) if row is not None else None


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
