"""The JSON-RPC 2.0 binding: `POST /a2a/{agencyId}/{blueprint}` (or `POST /a2a` with
`params.tenant` naming the agent), one method per request.

Errors are JSON-RPC errors with the protocol's codes, answered 200; the streaming methods
answer Server-Sent Events, each `data` a JSON-RPC response whose `result` is a
`StreamResponse`. An agent the tenant does not have is a 404 before any method runs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, post
from litestar.datastructures import State
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import PathParameter

from agency.services.a2a.wire import (
    ENCODER,
    GetTaskRequest,
    ListTasksRequest,
    PushConfigRequest,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    TaskIdRequest,
    TaskPushNotificationConfig,
    decode,
)
from agency.services.api.a2a import listing, push, service
from agency.services.api.a2a.agent import Agent
from agency.services.api.a2a.answers import (
    EventStream,
    agent_named,
    agent_of_tenant_param,
    check_version,
    sse,
)
from agency.services.api.a2a.card import PREFIX
from agency.services.api.a2a.errors import (
    A2AError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    UnsupportedOperation,
)
from agency.services.api.a2a.service import a2a_error
from agency.services.api.auth import Caller, Deps
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.guards import json_body
from agency.services.api.sse import EVENT_STREAM

AgencyPath = Annotated[str, PathParameter(name="agencyId")]
BlueprintPath = Annotated[str, PathParameter(name="blueprint")]
RpcId = str | int | None
_STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})


def _answer(rpc_id: RpcId, result: Any) -> Response[bytes]:
    body = b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (
        ENCODER.encode(rpc_id),
        ENCODER.encode(result),
    )
    return Response(body, media_type="application/json")


def _error(rpc_id: RpcId, error: A2AError, *, streaming: bool = False) -> Any:
    """The error as a JSON-RPC response; for a streaming method, as the one `error` event
    of a stream (what a client reading the stream's events expects)."""
    body = ENCODER.encode({"jsonrpc": "2.0", "id": rpc_id, "error": error.jsonrpc()})
    if streaming:
        return EventStream(iter([b"event: error\ndata: %s\n\n" % body]), media_type=EVENT_STREAM)
    return Response(body, media_type="application/json")


def _stream(rpc_id: RpcId, events: AsyncGenerator[StreamResponse, None]) -> Any:
    prefix = b'{"jsonrpc":"2.0","id":%s,"result":' % ENCODER.encode(rpc_id)
    return sse(events, lambda event: prefix + ENCODER.encode(event) + b"}")


async def _methods(agent: Agent, method: str, params: dict[str, Any], rpc_id: RpcId) -> Any:
    """The answer to one method: a `Response`, or the `Stream` of a streaming method."""
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "SendMessage": lambda: _send(agent, params, rpc_id),
        "SendStreamingMessage": lambda: _send_streaming(agent, params, rpc_id),
        "GetTask": lambda: _get(agent, params, rpc_id),
        "ListTasks": lambda: _list(agent, params, rpc_id),
        "CancelTask": lambda: _cancel(agent, params, rpc_id),
        "SubscribeToTask": lambda: _subscribe(agent, params, rpc_id),
        "CreateTaskPushNotificationConfig": lambda: _create_push(agent, params, rpc_id),
        "GetTaskPushNotificationConfig": lambda: _get_push(agent, params, rpc_id),
        "ListTaskPushNotificationConfigs": lambda: _list_push(agent, params, rpc_id),
        "DeleteTaskPushNotificationConfig": lambda: _delete_push(agent, params, rpc_id),
    }
    call = calls.get(method)
    if call is not None:
        return await call()
    if method == "GetExtendedAgentCard":
        raise UnsupportedOperation("this agent has no extended card: its card is the whole card")
    raise MethodNotFound(f"method {method[:80]!r} not found")


async def _send(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    task = await service.send_blocking(agent, decode(params, SendMessageRequest))
    return _answer(rpc_id, SendMessageResponse(task=task))


async def _send_streaming(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Any:
    return _stream(rpc_id, await service.send(agent, decode(params, SendMessageRequest)))


async def _get(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    request: GetTaskRequest = decode(params, GetTaskRequest)
    if request.history_length is not None and request.history_length < 0:
        raise InvalidParams("historyLength must not be negative")
    return _answer(rpc_id, await service.get_task(agent, request.id, request.history_length))


async def _list(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    return _answer(rpc_id, await listing.list_tasks(agent, decode(params, ListTasksRequest)))


async def _cancel(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    request: TaskIdRequest = decode(params, TaskIdRequest)
    return _answer(rpc_id, await service.cancel(agent, request.id))


async def _subscribe(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Any:
    request: TaskIdRequest = decode(params, TaskIdRequest)
    return _stream(rpc_id, await service.subscribe(agent, request.id))


async def _create_push(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    config: TaskPushNotificationConfig = decode(params, TaskPushNotificationConfig)
    if not config.task_id:
        raise InvalidParams("taskId is required: the task whose updates are pushed")
    run = await service.require_task(agent, config.task_id)
    return _answer(rpc_id, await push.configure(agent, run, config))


async def _push_request(agent: Agent, params: dict[str, Any]) -> tuple[PushConfigRequest, Any]:
    request: PushConfigRequest = decode(params, PushConfigRequest)
    return request, await service.require_task(agent, request.task_id)


async def _get_push(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    request, run = await _push_request(agent, params)
    return _answer(rpc_id, await push.get(agent, run, request.id))


async def _list_push(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    request, run = await _push_request(agent, params)
    return _answer(rpc_id, await push.listed(agent, run, request.page_size, request.page_token))


async def _delete_push(agent: Agent, params: dict[str, Any], rpc_id: RpcId) -> Response[bytes]:
    request, run = await _push_request(agent, params)
    await push.delete(agent, run, request.id)
    return _answer(rpc_id, {})


async def rpc(
    deps: ApiDeps,
    principal: Principal,
    request: Request[Any, Any, State],
    agent_path: tuple[str, str] | None,
) -> Any:
    rpc_id: RpcId = None
    streaming = False
    try:
        try:
            body = json_body(await request.body())
        except msgspec.DecodeError as e:
            raise ParseError(f"the request is not valid JSON: {e}") from e
        if not isinstance(body, dict):
            raise InvalidRequest("a JSON-RPC request is an object (batches are not supported)")
        given = body.get("id")
        if given is not None and (not isinstance(given, str | int) or isinstance(given, bool)):
            raise InvalidRequest("a JSON-RPC id is a string, a number or null")
        rpc_id = given
        method, params = body.get("method"), body.get("params", {})
        streaming = method in _STREAMING
        if body.get("jsonrpc") != "2.0" or not isinstance(method, str):
            raise InvalidRequest('a JSON-RPC 2.0 request needs "jsonrpc": "2.0" and a "method"')
        if not isinstance(params, dict):
            raise InvalidParams("params must be an object")
        check_version(request)
        agency_id, blueprint = agent_path or agent_of_tenant_param(params.get("tenant"))
        try:
            agent = await agent_named(deps, principal, request, agency_id, blueprint)
        except NotFoundException:
            if agent_path is not None:
                raise
            raise InvalidParams(f"no agent {agency_id[:40]}/{blueprint[:80]} here") from None
        return await _methods(agent, method, params, rpc_id)
    except A2AError as e:
        return _error(rpc_id, e, streaming=streaming)
    except msgspec.ValidationError as e:
        return _error(rpc_id, InvalidParams(f"params: {e}"), streaming=streaming)
    except HTTPException as e:
        if e.status_code in (401, 403) or (e.status_code == 404 and agent_path is not None):
            raise
        return _error(rpc_id, a2a_error(e), streaming=streaming)


@post(f"{PREFIX}/{{agencyId:str}}/{{blueprint:str}}", status_code=200)
async def agent_rpc(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Any:
    """The agent's JSON-RPC endpoint."""
    return await rpc(deps, principal, request, (agency_id, blueprint))


@post(PREFIX, status_code=200)
async def tenant_rpc(principal: Caller, deps: Deps, request: Request[Any, Any, State]) -> Any:
    """The tenant-level card's JSON-RPC endpoint: `params.tenant` names the agent."""
    return await rpc(deps, principal, request, None)


JSONRPC_ROUTES = [agent_rpc, tenant_rpc]
