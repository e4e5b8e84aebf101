"""Routes the console needs beyond the seed's: threads as paged trees, a thread's runs with
their usage, and re-execution of a thread (or its tree) against the current code.

Re-execution runs in the API process, in memory, over the recorded log: nothing is written
and no model or tool is called. It is bounded by `REEXECUTE_TIMEOUT`.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import msgspec
from litestar import get, post
from litestar.exceptions import NotFoundException, ServiceUnavailableException
from litestar.exceptions import ValidationException as Invalid
from litestar.params import JSONBody, QueryParameter

from contracts.http import EventView
from domain.comparison import Comparison
from domain.timeline import summary
from infra.jetstream.records import RecordedEvent
from projections import queries
from projections.thread_pages import MAX_PAGE, BadCursor, ThreadFilter, ThreadPage, thread_page
from services.api.auth import AgencyId, Caller, Deps, ThreadId, path_id, tenant_of, thread_created
from services.api.deps import ApiDeps
from services.api.eventview import event_view
from services.api.readback import caught_up
from services.api.routes_queries import int_param
from services.common.thread_tree import ThreadTree, TreeNode, load_tree
from services.replay.reexecute import reexecute

REEXECUTE_TIMEOUT = 60.0
# The statuses `status` selects (stated in the OpenAPI document by services/api/openapi.py).
THREAD_STATUSES = (
    "idle",
    "registered",
    "running",
    "paused",
    "completed",
    "canceled",
    "error",
    "terminated",
)


def _query(name: str) -> Any:
    return QueryParameter(name=name, required=False)


@get(
    "/agency/{agencyId:str}/threads",
    summary="The agency's threads as trees, a page of root threads at a time",
    description=(
        "Root threads newest first, each with its subagents (and theirs). `status`, "
        "`agentType` and `q` (part of a thread id) select threads anywhere in a tree; each "
        "node says whether it `match`ed. Pass `nextCursor` as `cursor` for the next page."
    ),
)
async def thread_trees(
    agency_id: AgencyId,
    principal: Caller,
    deps: Deps,
    status: Annotated[str | None, _query("status")] = None,
    agent_type: Annotated[str | None, _query("agentType")] = None,
    q: Annotated[str | None, _query("q")] = None,
    limit: Annotated[str | None, _query("limit")] = None,
    cursor: Annotated[
        str | None,
        QueryParameter(
            name="cursor",
            required=False,
            pattern=r"^[A-Za-z0-9_-]{1,64}$",
            description="`nextCursor` of the previous page (its last root thread's id); 404 "
            "when no such root thread is listed.",
        ),
    ] = None,
) -> ThreadPage:
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    if status and status not in THREAD_STATUSES:
        raise Invalid(f"status must be one of {', '.join(THREAD_STATUSES)}, got {status[:40]!r}")
    if q is not None and len(q) > 64:
        raise Invalid("q must be at most 64 characters")
    size = int_param("limit", limit, 50, 1, MAX_PAGE)
    wanted = ThreadFilter(status=status or None, agent_type=agent_type or None, id_part=q or None)
    async with deps.pool.acquire() as conn:
        if await queries.get_agency(conn, tenant, agency_id) is None:
            raise NotFoundException(f"agency {agency_id} not found")
        try:
            return await thread_page(conn, tenant, agency_id, wanted, limit=size, cursor=cursor)
        except BadCursor as e:
            raise NotFoundException(str(e)) from e


@get(
    "/agency/{agencyId:str}/agent/{threadId:str}",
    summary="The thread: agent type, parent, tree, status, current run, last event seq",
)
async def thread_view(
    agency_id: AgencyId, thread_id: ThreadId, principal: Caller, deps: Deps
) -> queries.ThreadView:
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    thread_id = path_id("thread id", thread_id)
    await caught_up(deps, tenant, thread_id)
    async with deps.pool.acquire() as conn:
        thread = await queries.get_thread(conn, tenant, agency_id, thread_id)
    if thread is None:
        raise NotFoundException(f"thread {thread_id} not found in agency {agency_id}")
    return thread


@get(
    "/agency/{agencyId:str}/agent/{threadId:str}/runs",
    summary="The thread's runs, oldest first, with their step, status, tokens and cost",
)
async def thread_runs(
    agency_id: AgencyId, thread_id: ThreadId, principal: Caller, deps: Deps
) -> list[queries.RunView]:
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    thread_id = path_id("thread id", thread_id)
    await caught_up(deps, tenant, thread_id)
    async with deps.pool.acquire() as conn:
        if await queries.get_thread(conn, tenant, agency_id, thread_id) is None:
            raise NotFoundException(f"thread {thread_id} not found in agency {agency_id}")
        return await queries.list_runs(conn, tenant, thread_id)


class ReexecuteBody(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"
):
    tree: bool = True


class SideEvent(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    seq: int
    type: str
    summary: str
    # The event as `/events` gives it.
    event: EventView


class Divergence(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    index: int
    differences: list[str]


class ThreadReport(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    thread_id: str
    parent_id: str | None
    depth: int
    same: bool
    compared: int
    divergence: Divergence | None
    note: str | None
    error: str | None
    recorded: list[SideEvent]
    reexecuted: list[SideEvent]


class ReexecuteReport(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    same: bool
    compared: int
    threads: list[ThreadReport]


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/reexecute",
    status_code=200,
    summary="Re-execute the thread (and its subagents) with the current code; compare",
    description=(
        "Runs the current runtime over the recorded inputs, in memory, calling no model or "
        "tool (their recorded results are replayed), and compares what it produces with "
        "the record event by event. Each thread reports both sides and the first "
        "divergence. Nothing is written. `tree: false` re-executes the thread alone."
    ),
)
async def reexecute_thread(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    data: JSONBody[ReexecuteBody | None] = None,
) -> ReexecuteReport:
    tenant = tenant_of(principal)
    await thread_created(deps, tenant, agency_id, thread_id)
    body = data or ReexecuteBody()
    try:
        async with asyncio.timeout(REEXECUTE_TIMEOUT):
            tree = await _tree(deps, tenant, thread_id, whole=body.tree)
            agency_events: list[RecordedEvent] = []
            agencies = {n.events[0].envelope.agency_id for n in tree.nodes if n.events}
            for agency in sorted(a for a in agencies if a):
                agency_events.extend(await deps.bus.store.read(tenant, "agency", agency))
            report = await reexecute(
                [node.events for node in tree.nodes], deps.system, agency_events=agency_events
            )
    except TimeoutError as e:
        raise ServiceUnavailableException(
            f"re-execution took longer than {REEXECUTE_TIMEOUT:.0f} s; try the thread "
            "alone (tree: false) or the CLI (agency replay --re-execute)"
        ) from e
    by_thread = {c.thread_id: c for c in report.comparisons}
    threads = [
        _thread_report(node, by_thread[node.thread_id])
        for node in tree.nodes
        if node.thread_id in by_thread
    ]
    return ReexecuteReport(same=report.same, compared=report.compared, threads=threads)


async def _tree(deps: ApiDeps, tenant: str, thread_id: str, *, whole: bool) -> ThreadTree:
    if whole:
        return await load_tree(deps.bus.store, deps.bus.nc, tenant, thread_id)
    events = await deps.bus.store.read(tenant, "thread", thread_id)
    return ThreadTree(thread_id, (TreeNode(thread_id, None, 0, tuple(events)),))


def _side(events: tuple[RecordedEvent, ...]) -> list[SideEvent]:
    return [
        SideEvent(
            seq=e.seq,
            type=e.type,
            summary=summary(e.envelope.payload),
            event=event_view(e.envelope, e.stream_seq),
        )
        for e in events
    ]


def _thread_report(node: TreeNode, c: Comparison) -> ThreadReport:
    d = c.divergence
    return ThreadReport(
        thread_id=c.thread_id,
        parent_id=node.parent_id,
        depth=node.depth,
        same=c.same,
        compared=c.compared,
        divergence=Divergence(index=d.index, differences=list(d.differences)) if d else None,
        note=c.stopped,
        error=c.failed,
        recorded=_side(c.recorded),
        reexecuted=_side(c.reexecuted),
    )


CONSOLE_ROUTES = [thread_trees, thread_view, thread_runs, reexecute_thread]
