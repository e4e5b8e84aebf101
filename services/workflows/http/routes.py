"""Workflow routes: create from a definition, list, look at the channel, inboxes, documents
and proposals, post, stop; schedules.

`{workflow}` is a workflow's id or its `name` / `name:tag` (so `@review:pr-1` needs no
lookup); every agency has `global`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import asyncpg
from litestar import Response, get, post
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import JSONBody, PathParameter, QueryParameter

from agency.contracts.commands import RemoveSchedule, SetSchedule, StopWorkflow
from agency.contracts.ids import new_id
from agency.domain.workflow_members import GLOBAL, parse_target
from agency.domain.workflow_state import WorkflowState
from agency.projections import workflow_queries as q
from agency.services.api.auth import (
    Caller,
    Deps,
    agency_events,
    agency_owned,
    path_id,
    tenant_and_agency,
    tenant_of,
)
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.model_check import model_problem
from agency.services.api.path_params import AgencyId, WorkflowRef
from agency.services.api.readback import send_and_read
from agency.services.api.routes_commands import Accepted
from agency.services.api.schedule_door import checked_cron, room_for_schedule
from agency.services.workflows import definition as definitions
from agency.services.workflows.http.body import as_document
from agency.services.workflows.http.ops import (
    check_members,
    create_workflow,
    definition_error,
    ensure_global_member,
    find_schedule,
    find_workflow,
    post_message,
)
from agency.services.workflows.http.route_bodies import (
    CreateWorkflowBody,
    PostBody,
    PostedOut,
    ScheduleBody,
    ScheduleOut,
    StopBody,
    WorkflowCreatedOut,
)

T = TypeVar("T")

# A channel's positions are PostgreSQL `integer`s: a larger `afterSeq` is a 400, not a 500.
MAX_CHANNEL_SEQ = 2**31 - 1
AfterSeq = Annotated[int, QueryParameter(name="afterSeq", ge=0, le=MAX_CHANNEL_SEQ)]
PageSize = Annotated[int, QueryParameter(ge=1, le=1000)]


@post(
    "/agency/{agencyId:str}/workflows",
    status_code=201,
    summary="Create (or extend) a workflow from a definition (YAML text or its object)",
    description="Answers 201 once its members exist, 202 when that takes longer.",
)
async def create(
    agency_id: AgencyId, data: JSONBody[CreateWorkflowBody], principal: Caller, deps: Deps
) -> Response[WorkflowCreatedOut]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    try:
        document = (
            definitions.load(data.definition)
            if isinstance(data.definition, str)
            else as_document(data.definition)
        )
        parsed = definitions.build(
            document, default_name=data.name or "", tag=data.tag,
            inputs=data.inputs, env=data.env, files=data.files,
        )  # fmt: skip
    except definitions.DefinitionError as e:
        raise definition_error(e) from e
    warnings = check_members(deps, parsed)
    for agent in parsed.agents:
        model = agent.inline.model if agent.inline is not None else ""
        if problem := await model_problem(deps, tenant, model):
            raise ValidationException(
                f"invalid workflow definition: agents.{agent.name}.model: {problem}"
            )
    wf, state = await create_workflow(deps, tenant, agency_id, parsed)
    body = WorkflowCreatedOut(
        id=wf, name=parsed.name, tag=parsed.tag, members=[a.name for a in parsed.agents],
        kickoff=parsed.kickoff, schedules=len(parsed.triggers), warnings=warnings,
    )  # fmt: skip
    return Response(body, status_code=201 if state is not None else 202)


Read = Callable[[asyncpg.Connection, str, str], Awaitable[T]]


async def _agency_read(principal: Principal, deps: ApiDeps, agency_id: str, read: Read[T]) -> T:
    """`read(conn, tenant, agency_id)` of the caller's agency; 404 when it has none such."""
    tenant = tenant_of(principal)
    await agency_events(deps, tenant, agency_id)
    async with deps.pool.acquire() as conn:
        return await read(conn, tenant, agency_id)


async def _callers_workflow(
    principal: Principal, deps: ApiDeps, agency_id: str, workflow: str
) -> tuple[str, WorkflowState]:
    """The caller's tenant and its `workflow` of the agency; 404 when it has none."""
    tenant = tenant_of(principal)
    return tenant, await find_workflow(deps, tenant, path_id("agency id", agency_id), workflow)


async def _workflow_read(
    principal: Principal, deps: ApiDeps, agency_id: str, workflow: str, read: Read[T]
) -> T:
    """`read(conn, tenant, workflow_id)` of the caller's `workflow`; 404 when it has none."""
    tenant, state = await _callers_workflow(principal, deps, agency_id, workflow)
    async with deps.pool.acquire() as conn:
        return await read(conn, tenant, state.workflow_id)


@get("/agency/{agencyId:str}/workflows", summary="The agency's workflows and their members")
async def list_workflows(
    agency_id: AgencyId, principal: Caller, deps: Deps
) -> list[q.WorkflowView]:
    return await _agency_read(principal, deps, agency_id, q.list_workflows)


@get("/agency/{agencyId:str}/workflows/{workflow:str}", summary="One workflow and its members")
async def get_workflow(
    agency_id: AgencyId, workflow: WorkflowRef, principal: Caller, deps: Deps
) -> q.WorkflowView:
    tenant, state = await _callers_workflow(principal, deps, agency_id, workflow)
    async with deps.pool.acquire() as conn:
        view = await q.get_workflow(conn, tenant, agency_id, state.workflow_id)
    if view is None:
        raise NotFoundException(f"workflow {workflow} is not in the read model yet")
    return view


@get(
    "/agency/{agencyId:str}/workflows/{workflow:str}/channel",
    summary="The channel, in order, a page at a time",
)
async def channel(
    agency_id: AgencyId,
    workflow: WorkflowRef,
    principal: Caller,
    deps: Deps,
    after_seq: AfterSeq = 0,
    limit: PageSize = 100,
) -> q.ChannelPage:
    return await _channel_page(principal, deps, agency_id, workflow, after_seq, limit)


@get(
    "/agency/{agencyId:str}/workflows/{workflow:str}/inbox/{member:str}",
    summary="A member's inbox: the messages mentioning it",
)
async def inbox(
    agency_id: AgencyId,
    workflow: WorkflowRef,
    member: Annotated[str, PathParameter(name="member", description="A member's name.")],
    principal: Caller,
    deps: Deps,
    after_seq: AfterSeq = 0,
    limit: PageSize = 100,
) -> q.ChannelPage:
    return await _channel_page(principal, deps, agency_id, workflow, after_seq, limit, member)


async def _channel_page(
    principal: Principal,
    deps: ApiDeps,
    agency_id: str,
    workflow: str,
    after_seq: int,
    limit: int,
    member: str | None = None,
) -> q.ChannelPage:
    """A page of the workflow's channel: the whole of it, or the messages mentioning
    `member` (404 when the workflow has no such member)."""
    tenant, state = await _callers_workflow(principal, deps, agency_id, workflow)
    if member is not None and member not in state.members:
        raise NotFoundException(f"no member {member!r} in {state.display_name}")
    async with deps.pool.acquire() as conn:
        return await q.channel_page(
            conn, tenant, state.workflow_id, after_seq=after_seq, limit=limit, mention=member
        )


@get("/agency/{agencyId:str}/workflows/{workflow:str}/documents", summary="Team documents")
async def documents(
    agency_id: AgencyId, workflow: WorkflowRef, principal: Caller, deps: Deps
) -> list[q.DocumentView]:
    return await _workflow_read(principal, deps, agency_id, workflow, q.documents)


@get("/agency/{agencyId:str}/workflows/{workflow:str}/proposals", summary="Proposals and votes")
async def proposals(
    agency_id: AgencyId, workflow: WorkflowRef, principal: Caller, deps: Deps
) -> list[q.ProposalView]:
    return await _workflow_read(principal, deps, agency_id, workflow, q.proposals)


@post(
    "/agency/{agencyId:str}/workflows/{workflow:str}/messages",
    status_code=202,
    summary="Post a message to the channel; @mentions (and `to`) ask members to act",
    description="Posting to `global` with a `to` naming an agent of the agency adds it.",
)
async def send(
    agency_id: AgencyId, workflow: WorkflowRef, data: JSONBody[PostBody], principal: Caller,
    deps: Deps,
) -> PostedOut:  # fmt: skip
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    state = await find_workflow(deps, tenant, agency_id, workflow)
    to = tuple(n.lstrip("@") for n in data.to)
    if parse_target(workflow)[0] == GLOBAL or state.name == GLOBAL:
        for agent in to:
            state = await ensure_global_member(deps, tenant, agency_id, agent)
    message_id = await post_message(deps, tenant, state, data.content, to=to)
    return PostedOut(message_id=message_id, workflow_id=state.workflow_id)


@post(
    "/agency/{agencyId:str}/workflows/{workflow:str}/stop",
    status_code=202,
    summary="Stop the workflow's run; its members' runs are canceled",
)
async def stop(
    agency_id: AgencyId,
    workflow: WorkflowRef,
    principal: Caller,
    deps: Deps,
    data: JSONBody[StopBody | None] = None,
) -> Accepted:
    tenant, state = await _callers_workflow(principal, deps, agency_id, workflow)
    command = StopWorkflow(
        agency_id=agency_id, workflow_id=state.workflow_id, reason=data.reason if data else ""
    )
    await deps.bus.commands.send(tenant, command)
    return Accepted()


@get("/agency/{agencyId:str}/schedules", summary="The agency's cron schedules")
async def list_schedules(
    agency_id: AgencyId, principal: Caller, deps: Deps
) -> list[q.ScheduleView]:
    return await _agency_read(principal, deps, agency_id, q.schedules)


@post("/agency/{agencyId:str}/schedules", status_code=202, summary="Add a cron schedule")
async def add_schedule(
    agency_id: AgencyId, data: JSONBody[ScheduleBody], principal: Caller, deps: Deps
) -> ScheduleOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    checked_cron(deps, data.cron)
    if (data.workflow is None) == (data.agent is None):
        raise ValidationException("name exactly one of `workflow` and `agent`")
    await room_for_schedule(deps, tenant)
    if data.agent is not None:
        state = await ensure_global_member(deps, tenant, agency_id, data.agent)
    else:
        state = await find_workflow(deps, tenant, agency_id, data.workflow or "")
    schedule = "sch_" + new_id()
    command = SetSchedule(
        agency_id=agency_id, schedule_id=schedule, name=data.name, cron=data.cron,
        target="agent" if data.agent else "workflow", workflow_id=state.workflow_id,
        agent=data.agent, message=data.message,
    )  # fmt: skip
    # Answered once recorded (bounded), so a remove right after finds the schedule.
    await send_and_read(deps, tenant, "schedule", schedule, command, schedule)
    return ScheduleOut(id=schedule)


@post(
    "/agency/{agencyId:str}/schedules/{scheduleId:str}/remove",
    status_code=202,
    summary="Remove a schedule",
)
async def remove_schedule(
    agency_id: AgencyId,
    schedule_id: Annotated[str, PathParameter(name="scheduleId")],
    principal: Caller,
    deps: Deps,
) -> Accepted:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    schedule_id = path_id("schedule id", schedule_id)
    await agency_owned(deps, tenant, agency_id)
    await find_schedule(deps, tenant, agency_id, schedule_id)
    command = RemoveSchedule(agency_id=agency_id, schedule_id=schedule_id)
    await deps.bus.commands.send(tenant, command)
    return Accepted()


WORKFLOW_ROUTES = [
    create,
    list_workflows,
    get_workflow,
    channel,
    inbox,
    documents,
    proposals,
    send,
    stop,
    list_schedules,
    add_schedule,
    remove_schedule,
]
