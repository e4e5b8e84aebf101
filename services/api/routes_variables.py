"""Scoped-variable bootstrap: `GET` / `POST /threads/{threadId}/variables/{requestId}`.

A `task` / `subagent_create` call whose subagent needs scoped variables (`scopedEnv`) set
neither in the runtime's environment nor provided is answered with the tool error
`subagent_env_required`, naming a request id; the thread's log holds the request
(`subagent.env_required`). `GET` answers the required and still-missing names, never a
value. `POST {"values": {"NAME": "value"}}` seals the values (`infra/sealing.py`)
and sends `subagents.provide_variables`: the coordinator records them on the thread and
spawns the deferred child with the call's original arguments; its result reaches the
thread as a queued message. Both are the caller's tenant's only (another tenant's thread
is a 404), like every thread route.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, post
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.params import JSONBody

from agency.contracts.commands import ProvideVariables
from agency.contracts.events.blueprint_fields import EnvName
from agency.contracts.http import Out
from agency.domain.child_naming import child_thread_id
from agency.domain.subagent_variables import env_request, provided
from agency.infra.sealing import seal
from agency.services.api.auth import Caller, Deps, path_id, tenant_of, thread_created
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import error_response
from agency.services.api.path_params import RequestId, ThreadId
from agency.services.api.routes_commands import Body

Value = Annotated[str, msgspec.Meta(min_length=1, max_length=65536)]


class VariablesRequest(Out, frozen=True, kw_only=True):
    """A spawn held back for scoped variables: the names, never the values."""

    request_id: str
    thread_id: str
    subagent_type: str
    child_thread_id: str
    required: list[str]
    missing: list[str]
    status: str


class ProvideVariablesBody(Body, frozen=True, kw_only=True):
    values: dict[EnvName, Value]


class VariablesAccepted(Out, frozen=True, kw_only=True):
    request_id: str
    child_thread_id: str
    names: list[str]
    status: str = "accepted"


class AlreadyProvided(HTTPException):
    status_code = 409


async def _request(
    deps: ApiDeps, tenant: str, thread_id: str, request_id: str
) -> tuple[str, VariablesRequest]:
    """(agency id, the request as answered), or 404."""
    path_id("request id", request_id)
    created = await thread_created(deps, tenant, None, thread_id)
    history = await deps.bus.store.read(tenant, "thread", thread_id)
    request = env_request(history, request_id)
    if request is None:
        raise NotFoundException(f"thread {thread_id} has no variables request {request_id}")
    done = provided(history, request_id)
    return created.agency_id, VariablesRequest(
        request_id=request_id,
        thread_id=thread_id,
        subagent_type=request.subagent_type,
        child_thread_id=child_thread_id(tenant, thread_id, request.tool_call_id),
        required=list(request.required),
        missing=[] if done else list(request.missing),
        status="provided" if done else "pending",
    )


@get(
    "/threads/{threadId:str}/variables/{requestId:str}",
    summary="The variables a held-back subagent spawn needs",
    description="Required and still-missing variable names of a `subagent_env_required` "
    "request (never their values); `status` is `pending` or `provided`.",
)
async def get_variables(
    thread_id: ThreadId, request_id: RequestId, principal: Caller, deps: Deps
) -> VariablesRequest:
    _, answer = await _request(deps, tenant_of(principal), thread_id, request_id)
    return answer


@post(
    "/threads/{threadId:str}/variables/{requestId:str}",
    status_code=202,
    summary="Provide the missing variables and start the held-back subagent",
    description="`values` must hold every missing name (and only required ones). They are "
    "stored sealed, never returned, and never shown to a model; the subagent then starts "
    "with the original call's arguments and its result reaches the thread as a message.",
    responses={409: error_response(409, "The variables of this request were provided.")},
)
async def post_variables(
    thread_id: ThreadId,
    request_id: RequestId,
    data: JSONBody[ProvideVariablesBody],
    principal: Caller,
    deps: Deps,
) -> VariablesAccepted:
    tenant = tenant_of(principal)
    agency_id, request = await _request(deps, tenant, thread_id, request_id)
    if request.status == "provided":
        raise AlreadyProvided(detail=f"the variables of request {request_id} were provided")
    unknown = sorted(set(data.values) - set(request.required))
    if unknown:
        raise ValidationException(
            f"values: {', '.join(unknown)} not required (required: {', '.join(request.required)})"
        )
    if absent := [n for n in request.missing if n not in data.values]:
        raise ValidationException(f"values: missing {', '.join(absent)}")
    names = tuple(sorted(data.values))
    await deps.bus.commands.send(
        tenant,
        ProvideVariables(
            agency_id=agency_id,
            parent_thread_id=thread_id,
            request_id=request_id,
            names=names,
            sealed_env=seal(data.values),
        ),
        idempotency_key=f"{thread_id}:variables:{request_id}",
    )
    return VariablesAccepted(
        request_id=request_id, child_thread_id=request.child_thread_id, names=list(names)
    )


VARIABLE_ROUTES = [get_variables, post_variables]
