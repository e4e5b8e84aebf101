"""Query routes: answers from the read models, always scoped to the caller's tenant.

An agency or thread of another tenant is answered exactly like one that does not exist
(404), so a tenant cannot even learn that another's ids exist.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import asyncpg
import msgspec
from litestar import Response, get
from litestar.exceptions import NotFoundException, ValidationException
from litestar.handlers import HTTPRouteHandler
from litestar.params import PathParameter, QueryParameter

from agency.contracts.codec import EVENT_TYPES, decode_event
from agency.contracts.errors import InvalidToken
from agency.contracts.events import BlueprintSpec
from agency.contracts.http import EventsPage
from agency.contracts.ids import validate_token
from agency.projections import agency_queries, queries, state_queries
from agency.services.agents.middleware import has_state, state_parts
from agency.services.api.auth import Caller, Deps
from agency.services.api.blueprint_body import BlueprintListItem
from agency.services.api.deps import ApiDeps
from agency.services.api.eventview import (
    EventFormat,
    StoredEnvelope,
    camel_value,
    event_view,
    stored_envelope,
)
from agency.services.api.readback import caught_up
from agency.services.threads.erasure import refuse_if_deleted
from agency.services.threads.view import thread_view
from agency.services.tool_execution.registered import registered_tools

DEFAULT_EVENTS_PAGE = 100
MAX_EVENTS_PAGE = 1000
MAX_SEQ = 10**18 - 1
_COUNT = re.compile(r"^[0-9]{1,18}$")

AgencyId = Annotated[str, PathParameter(name="agencyId")]
ThreadId = Annotated[str, PathParameter(name="threadId")]


class EnvelopesPage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A page of events as stored envelopes (`format=envelope`)."""

    format: Literal["envelope"] = "envelope"
    events: list[StoredEnvelope]
    has_more: bool


FormatParam = Annotated[
    EventFormat,
    QueryParameter(
        name="format",
        description="`view` (default): camelCase EventViews; `envelope`: the stored envelopes.",
    ),
]


class UsageResponse(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    group_by: str
    rows: list[queries.UsageRow]


def path_token(kind: str, value: str) -> str:
    try:
        return validate_token(kind, value)
    except InvalidToken as e:
        raise ValidationException(detail=str(e)) from e


def int_param(name: str, raw: str | None, default: int, low: int, high: int) -> int:
    """A count from the query: digits only, within [low, high]; absent means `default`."""
    if raw is None:
        return default
    value = int(raw) if _COUNT.match(raw) else None
    if value is None or not low <= value <= high:
        raise ValidationException(
            detail=f"{name} must be an integer from {low} to {high}, got {raw[:40]!r}"
        )
    return value


def event_types(raw: list[str] | None) -> list[str] | None:
    """`type` may repeat and may hold a comma-separated list; unknown types are refused."""
    if not raw:
        return None
    wanted = sorted({t.strip() for item in raw for t in item.split(",") if t.strip()})
    unknown = [t for t in wanted if t not in EVENT_TYPES]
    if unknown:
        raise ValidationException(
            detail=f"unknown event type {unknown[0][:60]!r}; known types: "
            + ", ".join(sorted(EVENT_TYPES))
        )
    return wanted or None


async def _agency_or_404(conn: asyncpg.Connection, tenant: str, agency_id: str) -> None:
    if await agency_queries.get_agency(conn, tenant, agency_id) is None:
        raise NotFoundException(detail=f"no agency {agency_id!r}")


async def _thread_or_404(
    conn: asyncpg.Connection, deps: ApiDeps, tenant: str, agency_id: str, thread_id: str
) -> queries.ThreadView:
    thread = await queries.get_thread(conn, tenant, agency_id, thread_id)
    if thread is None:
        await _no_thread(deps, tenant, agency_id, thread_id)
    assert thread is not None
    return thread


async def _no_thread(deps: ApiDeps, tenant: str, agency_id: str, thread_id: str) -> None:
    """410 for a deleted thread, else 404."""
    await refuse_if_deleted(deps.bus, tenant, thread_id)
    raise NotFoundException(detail=f"no agent thread {thread_id!r} in agency {agency_id!r}")


async def resolve_blueprint(
    conn: asyncpg.Connection, deps: ApiDeps, tenant: str, agency_id: str, name: str
) -> BlueprintSpec | None:
    """The agency's dynamic blueprint of that name, else the static one, else None."""
    stored = await agency_queries.get_blueprint(conn, tenant, agency_id, name)
    if stored is not None:
        return stored.spec
    return deps.system.blueprints.get(name)


def tool_metas(deps: ApiDeps, blueprint: BlueprintSpec | None) -> list[state_queries.ToolMeta]:
    if blueprint is None:
        return []
    return [
        state_queries.ToolMeta(
            name=tool.spec.name,
            description=tool.spec.description,
            parameters=dict(tool.spec.parameters),
        )
        for tool in deps.system.tools_for(blueprint).values()
    ]


@get("/agencies")
async def list_agencies(principal: Caller, deps: Deps) -> list[agency_queries.AgencyView]:
    async with deps.pool.acquire() as conn:
        return await agency_queries.list_agencies(conn, principal.tenant_id)


@get("/agency/{agencyId:str}/blueprints")
async def list_blueprints(
    agency_id: AgencyId, principal: Caller, deps: Deps
) -> list[BlueprintListItem]:
    """Static blueprints, overridden by the agency's dynamic ones of the same name."""
    agency_id = path_token("agency id", agency_id)
    async with deps.pool.acquire() as conn:
        await _agency_or_404(conn, principal.tenant_id, agency_id)
        dynamic = await agency_queries.list_blueprints(conn, principal.tenant_id, agency_id)
    views = agency_queries.merge_blueprints(deps.system.blueprints, dynamic)
    return [_list_item(deps, v) for v in views]


@get("/agency/{agencyId:str}/blueprints/{name:str}")
async def get_blueprint(
    agency_id: AgencyId,
    name: Annotated[str, PathParameter(name="name")],
    principal: Caller,
    deps: Deps,
) -> BlueprintListItem:
    """One blueprint, as listed: the agency's dynamic one of that name, else the static one."""
    agency_id = path_token("agency id", agency_id)
    name = path_token("blueprint name", name)
    async with deps.pool.acquire() as conn:
        await _agency_or_404(conn, principal.tenant_id, agency_id)
        stored = await agency_queries.get_blueprint(conn, principal.tenant_id, agency_id, name)
    view = agency_queries.blueprint_view(deps.system.blueprints, stored, name)
    if view is None:
        raise NotFoundException(detail=f"no blueprint {name!r} in agency {agency_id!r}")
    return _list_item(deps, view)


def _list_item(deps: ApiDeps, view: agency_queries.BlueprintView) -> BlueprintListItem:
    item = msgspec.convert(view, BlueprintListItem, from_attributes=True)
    if deps.system.code_agent_for(view.name) is not None:
        return msgspec.structs.replace(item, kind="code")
    return item


@get("/agency/{agencyId:str}/agents")
async def list_agents(
    agency_id: AgencyId, principal: Caller, deps: Deps
) -> list[queries.ThreadView]:
    agency_id = path_token("agency id", agency_id)
    await deps.listings.listed(principal.tenant_id, deps.settings.read_lag_timeout)
    async with deps.pool.acquire() as conn:
        await _agency_or_404(conn, principal.tenant_id, agency_id)
        return await queries.list_threads(conn, principal.tenant_id, agency_id)


@get("/agency/{agencyId:str}/agent/{threadId:str}/state")
async def agent_state(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
) -> Response[state_queries.ThreadStateView]:
    """The thread's state; each middleware with a `state` part adds it under its name."""
    agency_id = path_token("agency id", agency_id)
    thread_id = path_token("thread id", thread_id)
    tenant = principal.tenant_id
    await caught_up(deps, tenant, thread_id)
    async with deps.pool.acquire() as conn:
        view = await state_queries.thread_state(conn, tenant, agency_id, thread_id)
        if view is None:
            await _no_thread(deps, tenant, agency_id, thread_id)
        assert view is not None
        blueprint = await resolve_blueprint(conn, deps, tenant, agency_id, view.state.agent_type)
    folded = None
    if view.state.parent is not None:
        # A subagent may run a blueprint its parent's entry defined inline (`thread.created`).
        folded = await deps.threads.load(tenant, thread_id)
        blueprint = folded.inline_blueprint or blueprint
    metas = tool_metas(deps, blueprint)
    middleware = deps.system.middleware_for(blueprint) if blueprint is not None else []
    if blueprint is None or not any(has_state(m) or m.registrable_tools() for m in middleware):
        state = msgspec.structs.replace(view.state, tools=metas)
        return Response(content=msgspec.structs.replace(view, state=state))
    # Middleware parts and registered tools are folds of the thread's log, read from it.
    folded = folded or await deps.threads.load(tenant, thread_id)
    listed = {m.name for m in metas}
    metas += [
        state_queries.ToolMeta(
            name=tool.spec.name,
            description=tool.spec.description,
            parameters=dict(tool.spec.parameters),
        )
        for tool in registered_tools(deps.system, blueprint, folded).values()
        if tool.spec.name not in listed
    ]
    state = msgspec.structs.replace(view.state, tools=metas)
    body = msgspec.to_builtins(msgspec.structs.replace(view, state=state))
    body["state"].update(camel_value(state_parts(middleware, thread_view(folded))))
    return Response(content=body)


@get("/agency/{agencyId:str}/agent/{threadId:str}/events")
async def agent_events(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    from_seq: Annotated[
        str | None,
        QueryParameter(
            name="fromSeq",
            description="The first seq to return; 0 or absent: from the start.",
        ),
    ] = None,
    limit: Annotated[str | None, QueryParameter(name="limit")] = None,
    types: Annotated[list[str] | None, QueryParameter(name="type")] = None,
    correlation_id: Annotated[str | None, QueryParameter(name="correlationId")] = None,
    format: FormatParam = "view",
) -> EventsPage | EnvelopesPage:
    """The thread's events from `fromSeq`; with `correlationId`, its whole subagent tree
    in stream order (`fromSeq` then counts the stream sequence, given as `streamSeq`)."""
    agency_id = path_token("agency id", agency_id)
    thread_id = path_token("thread id", thread_id)
    start = int_param("fromSeq", from_seq, 0, 0, MAX_SEQ)
    size = int_param("limit", limit, DEFAULT_EVENTS_PAGE, 1, MAX_EVENTS_PAGE)
    wanted = event_types(types)
    tree = path_token("correlationId", correlation_id) if correlation_id else None
    tenant = principal.tenant_id
    await caught_up(deps, tenant, thread_id)
    async with deps.pool.acquire() as conn:
        thread = await _thread_or_404(conn, deps, tenant, agency_id, thread_id)
        if tree is not None and tree != thread.correlation_id:
            raise NotFoundException(
                detail=f"correlationId {tree!r} is not the tree of thread {thread_id!r} "
                f"(its root is {thread.correlation_id!r})"
            )
        rows, has_more = await queries.event_rows(
            conn, tenant, thread_id, start, size, wanted, tree
        )
    if format == "envelope":
        stored = [stored_envelope(raw, stream_seq) for raw, stream_seq in rows]
        return EnvelopesPage(events=stored, has_more=has_more)
    views = [event_view(decode_event(raw), stream_seq) for raw, stream_seq in rows]
    return EventsPage(events=views, has_more=has_more)


@get("/agency/{agencyId:str}/agent/{threadId:str}/tree")
async def agent_tree(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
) -> queries.TreeNode:
    """The thread's subagent tree: every descendant thread with its status."""
    agency_id = path_token("agency id", agency_id)
    thread_id = path_token("thread id", thread_id)
    await caught_up(deps, principal.tenant_id, thread_id)
    async with deps.pool.acquire() as conn:
        tree = await queries.thread_tree(conn, principal.tenant_id, agency_id, thread_id)
    if tree is None:
        await _no_thread(deps, principal.tenant_id, agency_id, thread_id)
    assert tree is not None
    return tree


@get("/usage")
async def usage(
    principal: Caller,
    deps: Deps,
    group_by: Annotated[queries.UsageGroup, QueryParameter(name="groupBy")] = "tenant",
) -> UsageResponse:
    """Model calls, tokens and cost of the caller's tenant, grouped."""
    group = group_by
    async with deps.pool.acquire() as conn:
        rows = await queries.usage(conn, principal.tenant_id, group)
    return UsageResponse(group_by=group, rows=rows)


QUERY_ROUTES: list[HTTPRouteHandler] = [
    list_agencies,
    list_blueprints,
    get_blueprint,
    list_agents,
    agent_state,
    agent_events,
    agent_tree,
    usage,
]
