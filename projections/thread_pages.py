"""Threads as trees, a page of root threads at a time, for the console's thread list.

A page holds root threads (no parent), newest first, each with its whole subagent tree.
Filters (status, agent type, part of an id) select threads anywhere in a tree: a tree is on
the page when any of its threads matches, and each node says whether it matched, so the
list can show the match in its context. The cursor (the last root of the previous page)
keeps a page cheap however many threads the agency has.
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
import msgspec

from agency.projections.queries import ThreadStatus, View
from agency.projections.rows import from_row

MAX_PAGE = 1000  # as `/events`: the OpenAPI document states one bound for `limit`


class ThreadNode(View, frozen=True, kw_only=True):
    id: str
    agent_type: str
    status: ThreadStatus
    current_run_id: str | None
    created_at: datetime
    updated_at: datetime
    run_count: int
    message_count: int
    last_seq: int
    match: bool
    children: list[ThreadNode]


class ThreadPage(View, frozen=True, kw_only=True):
    roots: list[ThreadNode]
    # Pass as `cursor` for the next page; null on the last page.
    next_cursor: str | None
    # Threads of the agency per status, whatever the filters (for the filter's counts).
    status_counts: dict[str, int]
    agent_types: list[str]


class ThreadFilter(msgspec.Struct, frozen=True, kw_only=True):
    status: str | None = None
    agent_type: str | None = None
    id_part: str | None = None


class BadCursor(LookupError):
    def __init__(self, cursor: str) -> None:
        super().__init__(f"cursor {cursor[:64]!r} is no root thread of this agency")


_COLUMNS = (
    "thread_id, parent_thread_id, correlation_id, agent_type, status, current_run_id, "
    "created_at, updated_at, run_count, message_count, last_seq"
)


def _like(part: str) -> str:
    return "%" + part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def thread_page(
    conn: asyncpg.Connection,
    tenant: str,
    agency_id: str,
    wanted: ThreadFilter,
    *,
    limit: int,
    cursor: str | None = None,
) -> ThreadPage:
    after = None
    if cursor:
        # The cursor is the last root of the previous page: the next page starts below it.
        after = await conn.fetchrow(
            "SELECT created_at, thread_id FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
            "AND thread_id = $3 AND parent_thread_id IS NULL",
            tenant,
            agency_id,
            cursor,
        )
        if after is None:
            raise BadCursor(cursor)
    match = (
        "($3::text IS NULL OR status = $3) AND ($4::text IS NULL OR agent_type = $4) "
        "AND ($5::text IS NULL OR thread_id ILIKE $5)"
    )
    params: list[object] = [
        tenant,
        agency_id,
        wanted.status,
        wanted.agent_type,
        _like(wanted.id_part) if wanted.id_part else None,
        after["created_at"] if after else None,
        after["thread_id"] if after else None,
        limit + 1,
    ]
    roots = await conn.fetch(
        f"SELECT {_COLUMNS} FROM threads r WHERE r.tenant_id = $1 AND r.agency_id = $2 "
        "AND r.parent_thread_id IS NULL "
        "AND ($6::timestamptz IS NULL OR (r.created_at, r.thread_id) < ($6, $7)) "
        "AND EXISTS (SELECT 1 FROM threads m WHERE m.tenant_id = $1 "
        f"AND m.correlation_id = r.correlation_id AND {match}) "
        "ORDER BY r.created_at DESC, r.thread_id DESC LIMIT $8",
        *params,
    )
    page, more = roots[:limit], len(roots) > limit
    members = await conn.fetch(
        f"SELECT {_COLUMNS}, ({match}) AS match FROM threads "
        "WHERE tenant_id = $1 AND agency_id = $2 AND correlation_id = ANY($6::text[]) "
        "ORDER BY created_at, thread_id",
        tenant,
        agency_id,
        wanted.status,
        wanted.agent_type,
        params[4],
        [r["correlation_id"] for r in page],
    )
    counts = await conn.fetch(
        "SELECT status, count(*) AS n FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
        "GROUP BY status",
        tenant,
        agency_id,
    )
    types = await conn.fetch(
        "SELECT DISTINCT agent_type FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
        "ORDER BY agent_type",
        tenant,
        agency_id,
    )
    last = page[-1] if page else None
    return ThreadPage(
        roots=_trees([r["thread_id"] for r in page], members),
        next_cursor=last["thread_id"] if more and last else None,
        status_counts={r["status"]: int(r["n"]) for r in counts},
        agent_types=[r["agent_type"] for r in types],
    )


def _trees(root_ids: list[str], rows: list[asyncpg.Record]) -> list[ThreadNode]:
    below: dict[str | None, list[asyncpg.Record]] = {}
    by_id = {r["thread_id"]: r for r in rows}
    for r in rows:
        if r["thread_id"] not in root_ids:
            below.setdefault(r["parent_thread_id"], []).append(r)

    def node(r: asyncpg.Record, seen: frozenset[str]) -> ThreadNode:
        kids = [k for k in below.get(r["thread_id"], []) if k["thread_id"] not in seen]
        children = [node(k, seen | {k["thread_id"]}) for k in kids]
        return from_row(ThreadNode, r, id=r["thread_id"], match=bool(r["match"]), children=children)

    return [node(by_id[t], frozenset({t})) for t in root_ids if t in by_id]
