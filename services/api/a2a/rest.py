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

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler

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
from agency.services.api.a2a.service import a2a_error
from agency.services.api.auth import Caller, Deps
from agency.services.api.guards import json_body

BASE = f"{PREFIX}/{{agencyId:str}}/{{blueprint:str}}"
TASK = "/tasks/{task:str}"
CONFIG = f"{TASK}/pushNotificationConfigs/{{config:str}}"

A2ARequest = Request[Any, Any, State]
# What a route does for the path's agent; the path's `task` and `config` are in the request.
Act = Callable[[Agent, A2ARequest], Awaitable[Any]]


def _json(value: Any, status: int = 200) -> Response[bytes]:
    return Response(ENCODER.encode(value), status_code=status, media_type="application/json")


def _refused(error: A2AError) -> Response[bytes]:
    return _json(error.rest(), error.http_status)


def _route(method: Callable[..., HTTPRouteHandler], path: str) -> Callable[[Act], HTTPRouteHandler]:
    """A route at `BASE + path` that runs its act for the path's agent, the protocol's
    errors answered as their HTTP statuses."""

    def route(act: Act) -> HTTPRouteHandler:
        async def handler(principal: Caller, deps: Deps, request: A2ARequest) -> Any:
            try:
                check_version(request)
                names = request.path_params
                agent = await agent_named(
                    deps, principal, request, names["agencyId"], names["blueprint"]
                )
                return await act(agent, request)
            except A2AError as e:
                return _refused(e)
            except msgspec.ValidationError as e:
                return _refused(InvalidParams(str(e)))
            except HTTPException as e:
                if e.status_code in (401, 403, 404):
                    raise
                return _refused(a2a_error(e))

        handler.__name__ = handler.__qualname__ = act.__name__
        handler.__doc__ = act.__doc__
        return method(f"{BASE}{path}", status_code=200)(handler)

    return route


async def _body(request: A2ARequest) -> Any:
    try:
        return json_body(await request.body())
    except msgspec.DecodeError as e:
        raise ParseError(f"the request body is not valid JSON: {e}") from e


def _count(request: A2ARequest, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None:
        return None
    if not value.isdigit() or len(value) > 9:
        raise InvalidParams(f"{name} must be a count, not {value[:20]!r}")
    return int(value)


@_route(post, "/message:send")
async def message_send(agent: Agent, request: A2ARequest) -> Response[bytes]:
    sent = decode(await _body(request), SendMessageRequest)
    return _json(SendMessageResponse(task=await service.send_blocking(agent, sent)))


@_route(post, "/message:stream")
async def message_stream(agent: Agent, request: A2ARequest) -> Any:
    sent = decode(await _body(request), SendMessageRequest)
    return sse(await service.send(agent, sent), ENCODER.encode)


@_route(get, "/tasks")
async def list_tasks(agent: Agent, request: A2ARequest) -> Response[bytes]:
    query = dict(request.query_params)
    return _json(await listing.list_tasks(agent, decode(query, ListTasksRequest)))


@_route(get, TASK)
async def get_or_subscribe(agent: Agent, request: A2ARequest) -> Any:
    task_id, _, verb = request.path_params["task"].partition(":")
    if verb == "subscribe":
        return sse(await service.subscribe(agent, task_id), ENCODER.encode)
    if verb:
        raise MethodNotFound(f"GET /tasks/{{id}}:{verb[:40]} is not a method")
    return _json(await service.get_task(agent, task_id, _count(request, "historyLength")))


@_route(post, TASK)
async def cancel_or_subscribe(agent: Agent, request: A2ARequest) -> Any:
    task_id, _, verb = request.path_params["task"].partition(":")
    if verb == "cancel":
        return _json(await service.cancel(agent, task_id))
    if verb == "subscribe":
        return sse(await service.subscribe(agent, task_id), ENCODER.encode)
    raise MethodNotFound(f"POST /tasks/{{id}}:{verb[:40]} is not a method: cancel, subscribe")


@_route(post, f"{TASK}/pushNotificationConfigs")
async def create_push_config(agent: Agent, request: A2ARequest) -> Response[bytes]:
    task = request.path_params["task"]
    config = decode(await _body(request), TaskPushNotificationConfig)
    if config.task_id and config.task_id != task:
        raise InvalidParams(f"taskId {config.task_id[:80]!r} is not the path's task")
    run = await service.require_task(agent, task)
    return _json(await push.configure(agent, run, config))


@_route(get, f"{TASK}/pushNotificationConfigs")
async def list_push_configs(agent: Agent, request: A2ARequest) -> Response[bytes]:
    size = _count(request, "pageSize")
    token = request.query_params.get("pageToken", "")
    run = await service.require_task(agent, request.path_params["task"])
    return _json(await push.listed(agent, run, size, token))


@_route(get, CONFIG)
async def get_push_config(agent: Agent, request: A2ARequest) -> Response[bytes]:
    run = await service.require_task(agent, request.path_params["task"])
    return _json(await push.get(agent, run, request.path_params["config"]))


@_route(delete, CONFIG)
async def delete_push_config(agent: Agent, request: A2ARequest) -> Response[bytes]:
    run = await service.require_task(agent, request.path_params["task"])
    await push.delete(agent, run, request.path_params["config"])
    return _json({})


@_route(get, "/extendedAgentCard")
async def extended_card(agent: Agent, request: A2ARequest) -> Any:
    raise UnsupportedOperation("this agent has no extended card: its card is the whole card")


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
