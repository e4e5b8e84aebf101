"""Typed reads of the workflow read models: workflows, members, the channel (paged),
inboxes, documents, proposals and schedules. Every query filters on the caller's tenant."""

from __future__ import annotations

import json
from datetime import datetime
from functools import partial
from typing import Any

import asyncpg
import msgspec

from agency.contracts.events import ScheduleOptions
from agency.projections.queries import View
from agency.projections.rows import fetch_all, from_row


class MemberView(View, frozen=True, kw_only=True):
    name: str
    blueprint: str
    agent_type: str
    thread_id: str
    status: str
    run_id: str | None
    runs: int


class WorkflowView(View, frozen=True, kw_only=True):
    id: str
    agency_id: str
    name: str
    tag: str
    status: str
    run_id: str | None
    stop_reason: str
    message_count: int
    limits: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    members: list[MemberView] = msgspec.field(default_factory=list)


class ChannelMessageView(View, frozen=True, kw_only=True):
    seq: int
    message_id: str
    sender: str
    content: str
    mentions: list[str]
    hop: int
    run_id: str | None
    posted_at: datetime


class ChannelPage(View, frozen=True, kw_only=True):
    messages: list[ChannelMessageView]
    has_more: bool


class DocumentView(View, frozen=True, kw_only=True):
    path: str
    content: str
    author: str
    updated_at: datetime


class ProposalView(View, frozen=True, kw_only=True):
    id: str
    title: str
    description: str
    author: str
    options: list[str]
    voters: list[str]
    votes: dict[str, str]
    status: str
    outcome: str
    tally: dict[str, int]
    opened_at: datetime


class ScheduleView(View, frozen=True, kw_only=True):
    id: str
    name: str
    cron: str
    target: str
    workflow_id: str | None
    agent: str | None
    message: str
    active: bool
    last_tick: datetime | None
    fired: int
    updated_at: datetime
    options: ScheduleOptions = msgspec.field(default_factory=ScheduleOptions)


def _workflow(r: asyncpg.Record, members: list[MemberView]) -> WorkflowView:
    limits = json.loads(r["limits"])
    return from_row(WorkflowView, r, id=r["workflow_id"], limits=limits, members=members)


async def _members(
    conn: asyncpg.Connection, tenant: str, workflow_ids: list[str]
) -> dict[str, list[MemberView]]:
    rows = await conn.fetch(
        "SELECT * FROM workflow_members WHERE tenant_id = $1 AND workflow_id = ANY($2) "
        "ORDER BY member",
        tenant,
        workflow_ids,
    )
    found: dict[str, list[MemberView]] = {}
    for r in rows:
        found.setdefault(r["workflow_id"], []).append(from_row(MemberView, r, name=r["member"]))
    return found


async def list_workflows(
    conn: asyncpg.Connection, tenant: str, agency_id: str
) -> list[WorkflowView]:
    rows = await conn.fetch(
        "SELECT * FROM workflows WHERE tenant_id = $1 AND agency_id = $2 "
        "ORDER BY created_at, workflow_id",
        tenant,
        agency_id,
    )
    members = await _members(conn, tenant, [r["workflow_id"] for r in rows])
    return [_workflow(r, members.get(r["workflow_id"], [])) for r in rows]


async def get_workflow(
    conn: asyncpg.Connection, tenant: str, agency_id: str, workflow_id: str
) -> WorkflowView | None:
    row = await conn.fetchrow(
        "SELECT * FROM workflows WHERE tenant_id = $1 AND agency_id = $2 AND workflow_id = $3",
        tenant,
        agency_id,
        workflow_id,
    )
    if row is None:
        return None
    members = await _members(conn, tenant, [workflow_id])
    return _workflow(row, members.get(workflow_id, []))


async def channel_page(
    conn: asyncpg.Connection,
    tenant: str,
    workflow_id: str,
    *,
    after_seq: int = 0,
    limit: int = 100,
    mention: str | None = None,
) -> ChannelPage:
    """Messages after `after_seq` in order; with `mention`, only that member's inbox."""
    rows = await conn.fetch(
        "SELECT * FROM channel_messages WHERE tenant_id = $1 AND workflow_id = $2 "
        "AND seq > $3 AND ($4::text IS NULL OR ($4 = ANY(mentions) AND sender <> $4)) "
        "ORDER BY seq LIMIT $5",
        tenant, workflow_id, after_seq, mention, limit + 1,
    )  # fmt: skip
    messages = [from_row(ChannelMessageView, r, mentions=list(r["mentions"])) for r in rows[:limit]]
    return ChannelPage(messages=messages, has_more=len(rows) > limit)


async def documents(conn: asyncpg.Connection, tenant: str, workflow_id: str) -> list[DocumentView]:
    query = (
        "SELECT * FROM workflow_documents WHERE tenant_id = $1 AND workflow_id = $2 ORDER BY path"
    )
    return await fetch_all(conn, partial(from_row, DocumentView), query, tenant, workflow_id)


def _proposal(r: asyncpg.Record) -> ProposalView:
    return from_row(
        ProposalView,
        r,
        id=r["proposal_id"],
        options=list(r["options"]),
        voters=list(r["voters"]),
        votes=json.loads(r["votes"]),
        tally=json.loads(r["tally"]),
    )


async def proposals(conn: asyncpg.Connection, tenant: str, workflow_id: str) -> list[ProposalView]:
    query = (
        "SELECT * FROM workflow_proposals WHERE tenant_id = $1 AND workflow_id = $2 "
        "ORDER BY opened_at, proposal_id"
    )
    return await fetch_all(conn, _proposal, query, tenant, workflow_id)


def _schedule(r: asyncpg.Record) -> ScheduleView:
    options = msgspec.json.decode(r["options"], type=ScheduleOptions)
    return from_row(ScheduleView, r, id=r["schedule_id"], options=options)


async def active_schedule_count(conn: asyncpg.Connection, tenant: str) -> int:
    """The tenant's schedules not removed, in every agency of it."""
    count: int = await conn.fetchval(
        "SELECT count(*) FROM schedules WHERE tenant_id = $1 AND active", tenant
    )
    return count


async def schedules(conn: asyncpg.Connection, tenant: str, agency_id: str) -> list[ScheduleView]:
    query = (
        "SELECT * FROM schedules WHERE tenant_id = $1 AND agency_id = $2 ORDER BY name, schedule_id"
    )
    return await fetch_all(conn, _schedule, query, tenant, agency_id)
