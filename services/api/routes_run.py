"""The seed's `POST /run` (Server-Sent Events) and `POST /serve` (one JSON answer).

Same body for both:
    {"agent": "alice", "message": "..."}                          an agent, in `@global`
    {"workflow": "review", "tag": "pr-1", "message": "..."}       a workflow of the agency
    {"agents": {"reviewer": {"model": "...", ...}}, "message": "..."}  agents defined inline
plus `agency` (optional when the tenant has one agency) and `timeoutSeconds`.

The message goes onto the workflow's channel (to the agent, or to every inline agent when
it mentions none) and the answer is followed in the log: `/run` streams `chunk`
(`{agent, text}`), `tool_call` (`{agent, tool, args}`), `message` (each channel message)
and finally `done` (`{content, usage, status}`); `/serve` answers
`{content, toolCalls, usage, messages, status}` once the workflow has gone quiet.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, ClassVar

import msgspec
from litestar import post
from litestar.datastructures import State
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import Schema
from litestar.openapi.spec.enums import OpenAPIType
from litestar.params import JSONBody
from litestar.response import ServerSentEvent, ServerSentEventMessage

from agency.contracts.http import Out
from agency.contracts.ids import MAX_TOKEN_LENGTH
from agency.domain.workflow_decisions import mentions_in
from agency.domain.workflow_state import WorkflowState
from agency.projections.agency_queries import list_agencies
from agency.services.api.auth import Caller, Deps, agency_events, path_id, tenant_of
from agency.services.api.budget_door import refuse_over_budget
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import ID_PATTERN, error_response
from agency.services.api.routes_commands import Body
from agency.services.api.streaming import closing_event
from agency.services.workflows import definition as definitions
from agency.services.workflows.http.body import InlineMembers, as_document
from agency.services.workflows.http.ops import (
    AGENT_REF,
    adhoc_workflow,
    check_members,
    definition_error,
    ensure_global_member,
    find_workflow,
    post_message,
)
from agency.services.workflows.http.watch import (
    Chunk,
    Done,
    Item,
    LogPosition,
    Posted,
    ToolCallSeen,
    log_position,
    watch,
)


class RunBody(Body, frozen=True, kw_only=True):
    # Not blank: something must be said.
    message: Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024, pattern=r"\S")]
    agent: Annotated[str, msgspec.Meta(pattern=AGENT_REF)] | None = None
    # A workflow's name (or id); its tag goes in `tag`.
    workflow: Annotated[str, msgspec.Meta(pattern=AGENT_REF)] | None = None
    tag: Annotated[str, msgspec.Meta(max_length=MAX_TOKEN_LENGTH, pattern=r"^[A-Za-z0-9_-]*$")] = ""
    # Members defined inline, as in a workflow definition's `agents` (docs/workflows.md).
    agents: InlineMembers | None = None
    agency: Annotated[str, msgspec.Meta(pattern=ID_PATTERN)] | None = None
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 300.0

    __exactly_one__: ClassVar[dict[str, Schema]] = {
        "agent": Schema(type=OpenAPIType.STRING),
        "workflow": Schema(type=OpenAPIType.STRING),
        "agents": Schema(type=OpenAPIType.OBJECT, min_properties=1),
    }


class UsageOut(Out, frozen=True, kw_only=True):
    input_tokens: int
    output_tokens: int


class ServeOut(Out, frozen=True, kw_only=True):
    """`toolCalls` and `messages` as the watch saw them (their fields are single words)."""

    content: str
    tool_calls: list[ToolCallSeen]
    usage: UsageOut
    messages: list[Posted]
    status: str
    workflow_id: str


async def _agency(deps: ApiDeps, tenant: str, agency: str | None) -> str:
    if agency:
        agency = path_id("agency id", agency)
        await agency_events(deps, tenant, agency)
        return agency
    async with deps.pool.acquire() as conn:
        agencies = await list_agencies(conn, tenant)
    if not agencies:
        raise NotFoundException("this tenant has no agency yet: create one (POST /agencies)")
    if len(agencies) > 1:
        raise ClientException(
            status_code=409,
            detail=f"name the `agency`: this tenant has {len(agencies)} agencies ("
            + ", ".join(a.id for a in agencies[:20])
            + (", …)" if len(agencies) > 20 else ")"),
        )
    return agencies[0].id


async def _target(
    deps: ApiDeps, tenant: str, data: RunBody
) -> tuple[WorkflowState, tuple[str, ...]]:
    """The workflow to post to, and who the message is addressed to beyond its mentions."""
    chosen = [k for k in ("agent", "workflow", "agents") if getattr(data, k)]
    if len(chosen) != 1:
        raise ValidationException("name exactly one of `agent`, `workflow` and `agents`")
    agency = await _agency(deps, tenant, data.agency)
    if data.agent:
        agent = data.agent.lstrip("@")
        return await ensure_global_member(deps, tenant, agency, agent), (agent,)
    if data.workflow:
        ref = data.workflow + (f":{data.tag}" if data.tag else "")
        return await find_workflow(deps, tenant, agency, ref), ()
    assert data.agents is not None
    try:
        inline = definitions.build(as_document(data.agents), default_name="run")
    except definitions.DefinitionError as e:
        raise definition_error(e) from e
    agents = {a.name: a.inline for a in inline.agents if a.inline is not None}
    if len(agents) != len(inline.agents):
        raise ValidationException("`agents` must define each agent inline")
    check_members(deps, inline)  # its warnings: a `hitl.tools` name that guards nothing
    state = await adhoc_workflow(deps, tenant, agency, agents)
    named = mentions_in(data.message, list(state.members), "user")
    return state, () if named else tuple(sorted(agents))


async def _start(deps: ApiDeps, tenant: str, data: RunBody) -> tuple[str, str, LogPosition]:
    state, to = await _target(deps, tenant, data)
    await refuse_over_budget(deps, tenant, state.agency_id)
    position = await log_position(deps.bus)
    message_id = await post_message(deps, tenant, state, data.message, to=to)
    return state.workflow_id, message_id, position


def _sse(item: Item) -> ServerSentEventMessage:
    match item:
        case Chunk(agent=agent, text=text):
            return ServerSentEventMessage(
                event="chunk", data=json.dumps({"agent": agent, "text": text})
            )
        case ToolCallSeen(agent=agent, tool=tool, args=args):
            data = json.dumps({"agent": agent, "tool": tool, "args": args}, default=str)
            return ServerSentEventMessage(event="tool_call", data=data)
        case Posted() as p:
            data = json.dumps(
                {
                    "seq": p.seq,
                    "sender": p.sender,
                    "content": p.content,
                    "mentions": list(p.mentions),
                }
            )
            return ServerSentEventMessage(event="message", data=data)
        case Done() as d:
            data = json.dumps(
                {
                    "content": d.content,
                    "usage": {
                        "inputTokens": d.usage.input_tokens,
                        "outputTokens": d.usage.output_tokens,
                    },
                    "status": d.status,
                }
            )
            return ServerSentEventMessage(event="done", data=data)


_RUN_ERRORS = {
    404: error_response(404, "No such agency, agent or workflow (or the tenant has no agency)."),
    409: error_response(
        409, "No `agency` named while the tenant has several; or the workflow has no members."
    ),
    429: error_response(429, "The tenant's or the agency's spend budget is spent this period."),
}


@post(
    "/run",
    status_code=200,
    summary="Run an agent or a workflow, streamed (SSE)",
    description=(
        "Server-Sent Events: `chunk` (`{agent, text}`), `tool_call` (`{agent, tool, args}`), "
        "`message` (`{seq, sender, content, mentions}`) and finally `done` (`{content, usage, "
        "status}`); see docs/api.md."
    ),
    responses={
        200: ResponseSpec(
            data_container=str,
            media_type="text/event-stream",
            description="The run's events, until `done`.",
            generate_examples=False,
        ),
        **_RUN_ERRORS,
    },
)
async def run(
    data: JSONBody[RunBody], principal: Caller, deps: Deps, state: State
) -> ServerSentEvent:
    tenant = tenant_of(principal)
    workflow_id, message_id, position = await _start(deps, tenant, data)
    closing = closing_event(state)

    async def events() -> AsyncIterator[ServerSentEventMessage]:
        async for item in watch(
            deps.bus, tenant, workflow_id, message_id,
            after_stream_seq=position, timeout=data.timeout_seconds,
        ):  # fmt: skip
            yield _sse(item)
            if closing.is_set():
                return

    return ServerSentEvent(events())


@post(
    "/serve",
    status_code=200,
    summary="Run an agent or a workflow; one JSON answer",
    responses=_RUN_ERRORS,
)
async def serve(data: JSONBody[RunBody], principal: Caller, deps: Deps) -> ServeOut:
    tenant = tenant_of(principal)
    workflow_id, message_id, position = await _start(deps, tenant, data)
    done = Done(status="timeout")
    async for item in watch(
        deps.bus, tenant, workflow_id, message_id,
        after_stream_seq=position, timeout=data.timeout_seconds,
    ):  # fmt: skip
        if isinstance(item, Done):
            done = item
    return ServeOut(
        content=done.content,
        tool_calls=done.tool_calls,
        usage=UsageOut(
            input_tokens=done.usage.input_tokens, output_tokens=done.usage.output_tokens
        ),
        messages=done.messages,
        status=done.status,
        workflow_id=workflow_id,
    )


RUN_ROUTES = [run, serve]
