"""Routes the console needs beyond the seed's: threads as paged trees, a thread's runs with
their usage, and re-execution of a thread (or its tree) against the current code.

Re-execution is the runtime's: the route asks it over the bus
(`tenant.<t>.req.runtime.reexecute`, `contracts/reexecution.py`), and the runtime runs its
current code in memory over the recorded log (nothing is written, no model or tool is
called). The route waits `ANSWER_TIMEOUT` for the answer and answers 503 with the reason
when no runtime answers, or the runtime could not re-execute.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import get, post
from litestar.exceptions import (
    NotFoundException,
    ServiceUnavailableException,
    ValidationException as Invalid,
)
from litestar.params import JSONBody, QueryParameter
from nats.errors import NoRespondersError, TimeoutError as NatsTimeoutError

from agency.contracts.http import EventView
from agency.contracts.reexecution import (
    REEXECUTION_SECONDS,
    ComparedEvent,
    ReexecutionReply,
    ReexecutionRequest,
    ThreadComparison,
)
from agency.contracts.subjects import reexecution_subject
from agency.domain.timeline import summary
from agency.projections import agency_queries, queries
from agency.projections.thread_pages import (
    MAX_PAGE,
    BadCursor,
    ThreadFilter,
    ThreadPage,
    thread_page,
)
from agency.services.api.auth import (
    Caller,
    Deps,
    path_id,
    tenant_and_agency,
    tenant_of,
    thread_created,
)
from agency.services.api.eventview import event_view
from agency.services.api.path_params import AgencyId, ThreadId
from agency.services.api.readback import caught_up
from agency.services.api.routes_queries import int_param
from agency.services.threads.erasure import refuse_if_deleted

# The runtime bounds a re-execution by REEXECUTION_SECONDS and says so; a little longer here.
ANSWER_TIMEOUT = REEXECUTION_SECONDS + 5.0
_reply_decoder = msgspec.json.Decoder(ReexecutionReply)
_encoder = msgspec.json.Encoder()
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
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    if status and status not in THREAD_STATUSES:
        raise Invalid(f"status must be one of {', '.join(THREAD_STATUSES)}, got {status[:40]!r}")
    if q is not None and len(q) > 64:
        raise Invalid("q must be at most 64 characters")
    size = int_param("limit", limit, 50, 1, MAX_PAGE)
    wanted = ThreadFilter(status=status or None, agent_type=agent_type or None, id_part=q or None)
    async with deps.pool.acquire() as conn:
        if await agency_queries.get_agency(conn, tenant, agency_id) is None:
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
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("thread id", thread_id)
    await caught_up(deps, tenant, thread_id)
    async with deps.pool.acquire() as conn:
        thread = await queries.get_thread(conn, tenant, agency_id, thread_id)
    if thread is None:
        await refuse_if_deleted(deps.bus, tenant, thread_id)
        raise NotFoundException(f"thread {thread_id} not found in agency {agency_id}")
    return thread


@get(
    "/agency/{agencyId:str}/agent/{threadId:str}/runs",
    summary="The thread's runs, oldest first, with their step, status, tokens and cost",
)
async def thread_runs(
    agency_id: AgencyId, thread_id: ThreadId, principal: Caller, deps: Deps
) -> list[queries.RunView]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("thread id", thread_id)
    await caught_up(deps, tenant, thread_id)
    async with deps.pool.acquire() as conn:
        thread = await queries.get_thread(conn, tenant, agency_id, thread_id)
        if thread is not None:
            return await queries.list_runs(conn, tenant, thread_id)
    await refuse_if_deleted(deps.bus, tenant, thread_id)
    raise NotFoundException(f"thread {thread_id} not found in agency {agency_id}")


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
    request = _encoder.encode(ReexecutionRequest(thread_id=thread_id, tree=body.tree))
    try:
        msg = await deps.bus.nc.request(
            reexecution_subject(tenant), request, timeout=ANSWER_TIMEOUT
        )
    except NoRespondersError as e:
        raise ServiceUnavailableException(
            "no runtime is running to re-execute the thread; retry once the runtime service is up"
        ) from e
    except NatsTimeoutError as e:
        raise ServiceUnavailableException(
            f"no runtime answered the re-execution within {ANSWER_TIMEOUT:g} s; retry, try "
            "the thread alone (tree: false) or the CLI (agency replay --re-execute)"
        ) from e
    try:
        reply = _reply_decoder.decode(msg.data)
    except msgspec.DecodeError as e:
        raise ServiceUnavailableException(f"the runtime's answer could not be read: {e}") from e
    if reply.report is None:
        if reply.refused == "not_found":
            raise NotFoundException(reply.reason)
        raise ServiceUnavailableException(reply.reason or "the runtime did not re-execute")
    report = reply.report
    return ReexecuteReport(
        same=report.same,
        compared=report.compared,
        threads=[_thread_report(t) for t in report.threads],
    )


def _side(events: tuple[ComparedEvent, ...]) -> list[SideEvent]:
    return [
        SideEvent(
            seq=e.envelope.seq,
            type=e.envelope.type,
            summary=summary(e.envelope.payload),
            event=event_view(e.envelope, e.stream_seq),
        )
        for e in events
    ]


def _thread_report(t: ThreadComparison) -> ThreadReport:
    """`t` as the console shows it: the comparison's own fields, and each side's events
    summarised (`_side`)."""
    fields = msgspec.structs.replace(t, recorded=(), reexecuted=())
    report = msgspec.convert(fields, ThreadReport, from_attributes=True)
    return msgspec.structs.replace(
        report, recorded=_side(t.recorded), reexecuted=_side(t.reexecuted)
    )


CONSOLE_ROUTES = [thread_trees, thread_view, thread_runs, reexecute_thread]
