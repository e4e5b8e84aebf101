"""The HTTP+JSON binding, under the agent's URL `/a2a/{agencyId}/{blueprint}`:

    POST /message:send              SendMessage → SendMessageResponse
    POST /message:stream            SendStreamingMessage → SSE of StreamResponse
    GET  /tasks/{id}                GetTask (`historyLength`)
    GET  /tasks                     ListTasks (its fields as query parameters)
    POST /tasks/{id}:cancel         CancelTask
    POST /tasks/{id}:subscribe      SubscribeToTask → SSE (GET too)
    POST   /tasks/{id}/pushNotificationConfigs              CreateTaskPushNotificationConfig
    GET    /tasks/{id}/pushNotificationConfigs              ListTaskPushNotificationConfigs
    GET    /tasks/{id}/pushNotificationConfigs/{configId}   GetTaskPushNotificationConfig
    DELETE /tasks/{id}/pushNotificationConfigs/{configId}   DeleteTaskPushNotificationConfig

An error answers its HTTP status with a `google.rpc.Status` body (`{"error": {code, status,
message, details: [ErrorInfo]}}`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.params import PathParameter

from agency.services.a2a.wire import (
    ENCODER,
    ListTasksRequest,
    SendMessageRequest,
    SendMessageResponse,
    TaskPushNotificationConfig,
    decode,
)
from agency.services.api.a2a import listing, push, service
from agency.services.api.a2a.agent import Agent
from agency.services.api.a2a.answers import agent_named, check_version, sse
from agency.services.api.a2a.card import PREFIX
from agency.services.api.a2a.errors import (
    A2AError,
    InvalidParams,
    MethodNotFound,
    ParseError,
    UnsupportedOperation,
)
from agency.services.api.a2a.jsonrpc import AgencyPath, BlueprintPath
from agency.services.api.a2a.service import a2a_error
from agency.services.api.auth import Caller, Deps
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.guards import json_body

BASE = f"{PREFIX}/{{agencyId:str}}/{{blueprint:str}}"
TaskPath = Annotated[str, PathParameter(name="task")]
ConfigPath = Annotated[str, PathParameter(name="config")]


def _json(value: Any, status: int = 200) -> Response[bytes]:
    return Response(ENCODER.encode(value), status_code=status, media_type="application/json")


def _refused(error: A2AError) -> Response[bytes]:
    return _json(error.rest(), error.http_status)


async def _serve(
    deps: ApiDeps,
    principal: Principal,
    request: Request[Any, Any, State],
    agency_id: str,
    blueprint: str,
    act: Any,
) -> Any:
    """Run `act(agent)` for the path's agent; the protocol's errors as its HTTP answers."""
    try:
        check_version(request)
        agent = await agent_named(deps, principal, request, agency_id, blueprint)
        return await act(agent)
    except A2AError as e:
        return _refused(e)
    except msgspec.ValidationError as e:
        return _refused(InvalidParams(str(e)))
    except HTTPException as e:
        if e.status_code in (401, 403, 404):
            raise
        return _refused(a2a_error(e))


async def _body(request: Request[Any, Any, State]) -> Any:
    try:
        return json_body(await request.body())
    except msgspec.DecodeError as e:
        raise ParseError(f"the request body is not valid JSON: {e}") from e


@post(f"{BASE}/message:send", status_code=200)
async def message_send(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Response[bytes]:
        sent = decode(await _body(request), SendMessageRequest)
        return _json(SendMessageResponse(task=await service.send_blocking(agent, sent)))

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@post(f"{BASE}/message:stream", status_code=200)
async def message_stream(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Any:
        sent = decode(await _body(request), SendMessageRequest)
        return sse(await service.send(agent, sent), ENCODER.encode)

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@get(f"{BASE}/tasks")
async def list_tasks(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Response[bytes]:
        query = dict(request.query_params)
        return _json(await listing.list_tasks(agent, decode(query, ListTasksRequest)))

    return await _serve(deps, principal, request, agency_id, blueprint, act)


def _history_length(request: Request[Any, Any, State]) -> int | None:
    value = request.query_params.get("historyLength")
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise InvalidParams(f"historyLength must be a count, not {value[:20]!r}")
    return int(value)


@get(f"{BASE}/tasks/{{task:str}}")
async def get_or_subscribe(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    task: TaskPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Any:
        task_id, _, verb = task.partition(":")
        if verb == "subscribe":
            return sse(await service.subscribe(agent, task_id), ENCODER.encode)
        if verb:
            raise MethodNotFound(f"GET /tasks/{{id}}:{verb[:40]} is not a method")
        return _json(await service.get_task(agent, task_id, _history_length(request)))

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@post(f"{BASE}/tasks/{{task:str}}", status_code=200)
async def cancel_or_subscribe(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    task: TaskPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Any:
        task_id, _, verb = task.partition(":")
        if verb == "cancel":
            return _json(await service.cancel(agent, task_id))
        if verb == "subscribe":
            return sse(await service.subscribe(agent, task_id), ENCODER.encode)
        raise MethodNotFound(f"POST /tasks/{{id}}:{verb[:40]} is not a method: cancel, subscribe")

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@post(f"{BASE}/tasks/{{task:str}}/pushNotificationConfigs", status_code=200)
async def create_push_config(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    task: TaskPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Response[bytes]:
        config = decode(await _body(request), TaskPushNotificationConfig)
        if config.task_id and config.task_id != task:
            raise InvalidParams(f"taskId {config.task_id[:80]!r} is not the path's task")
        run = await service.require_task(agent, task)
        return _json(await push.configure(agent, run, config))

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@get(f"{BASE}/tasks/{{task:str}}/pushNotificationConfigs")
async def list_push_configs(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    task: TaskPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Response[bytes]:
        size = request.query_params.get("pageSize")
        if size is not None and (not size.isdigit() or len(size) > 9):
            raise InvalidParams(f"pageSize must be a count, not {size[:20]!r}")
        token = request.query_params.get("pageToken", "")
        run = await service.require_task(agent, task)
        page = await push.listed(agent, run, int(size) if size else None, token)
        return _json(page)

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@get(f"{BASE}/tasks/{{task:str}}/pushNotificationConfigs/{{config:str}}")
async def get_push_config(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    task: TaskPath,
    config: ConfigPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Response[bytes]:
        run = await service.require_task(agent, task)
        return _json(await push.get(agent, run, config))

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@delete(f"{BASE}/tasks/{{task:str}}/pushNotificationConfigs/{{config:str}}", status_code=200)
async def delete_push_config(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    task: TaskPath,
    config: ConfigPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Response[bytes]:
        run = await service.require_task(agent, task)
        await push.delete(agent, run, config)
        return _json({})

    return await _serve(deps, principal, request, agency_id, blueprint, act)


@get(f"{BASE}/extendedAgentCard")
async def extended_card(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    async def act(agent: Agent) -> Any:
        raise UnsupportedOperation("this agent has no extended card: its card is the whole card")

    return await _serve(deps, principal, request, agency_id, blueprint, act)


REST_ROUTES = [
    message_send,
    message_stream,
    list_tasks,
    get_or_subscribe,
    cancel_or_subscribe,
    create_push_config,
    list_push_configs,
    get_push_config,
    delete_push_config,
    extended_card,
]
