"""Agency as an MCP server: `/mcp` on the HTTP API, over streamable HTTP.

The endpoint sits behind the API's own authentication (a tenant's API key as
`Authorization: Bearer`, or `X-SECRET`), so a bad key is refused with the API's 401 before
MCP sees the request; the 401 points to the protected-resource metadata (`metadata`). The
tools (`tools`), the thread files as resources (`resources`) and the blueprints as prompts
(`prompts`) call the API's routes in-process with the caller's credential. The server is
stateless: every request stands alone, so any API process can answer it. Clients of the
2025 revisions (`initialize`) and of 2026-07-28 (`server/discover`, a `_meta` envelope on
every request) are both served; `ping` is answered on every revision. The session manager
runs inside the app's lifespan and stops with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import httpx
import mcp_types as types
import msgspec
import structlog
from litestar import Litestar, Request as Request_, Response, asgi
from litestar.exceptions import HTTPException
from litestar.handlers import ASGIRouteHandler, BaseRouteHandler
from litestar.types import Receive, Scope, Send
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from nats.errors import Error as NatsError
from starlette.requests import Request

from agency.contracts.http import RunStatus
from agency.contracts.version import package_version
from agency.infra.jetstream.errors import StoreTimeout
from agency.services.api.admission_door import admission_opt
from agency.services.api.auth import tenant_of
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.mcp import prompts, resources
from agency.services.api.mcp.logs import LogLevels, RequestLog, credential_of
from agency.services.api.mcp.metadata import challenge, metadata_routes
from agency.services.api.mcp.tools import TOOLS, AgencyTool, InvalidArguments, Operations
from agency.services.api.run_outcome import Progress, RunOutcome
from agency.services.api.streaming import closing_event
from agency.services.client import ApiError, AsyncAgencyClient

log = structlog.get_logger(__name__)

# What a handler is given: `request` is the HTTP request that carried the message.
Context = ServerRequestContext[Any, Any]
# What a listing is given: the cursor of the page asked for, if any.
Paging = types.PaginatedRequestParams | None

MCP_PATH = "/mcp"
# The in-process client's base: requests never leave the process, the host is a name only.
_IN_PROCESS = "http://agency.internal"
_FORWARDED = ("x-secret", "user-agent")
INSTRUCTIONS = (
    "Agency runs LLM agents in threads. Find your agency with list_agencies, the agent "
    "types with list_blueprints, start a thread with create_thread, talk to it with "
    "invoke_and_wait. A run that needs a person's approval answers status `paused` with "
    "`pendingApproval`: decide with approve. cancel stops a run; terminate shuts a thread "
    "down for good."
)


# How long a 2026-07-28 client may keep a list (`ttlMs`, `cacheScope`): the tools and the
# template are the same for every caller and change only with a release; a caller's
# resources and prompts are theirs alone and change at any moment (the SDK's default).
_STATIC = CacheHint(ttl_ms=300_000, scope="public")
CACHE_HINTS: dict[CacheableMethod, CacheHint] = {
    "tools/list": _STATIC,
    "resources/templates/list": _STATIC,
}


def _object_schema(kind: type[Any]) -> dict[str, Any]:
    """A struct's JSON Schema with the object at its root, as MCP wants tool schemas."""
    schema = msgspec.json.schema(kind)
    defs: dict[str, Any] = schema.get("$defs", {})
    name = str(schema.get("$ref", "")).rsplit("/", 1)[-1]
    return {**defs[name], "$defs": defs} if name in defs else schema


def _describe(tool: AgencyTool[Any, Any]) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=_object_schema(tool.input),
        output_schema=_object_schema(tool.output),
        annotations=types.ToolAnnotations(
            title=tool.title, read_only_hint=tool.read_only, open_world_hint=False
        ),
    )


def _progress(ctx: Context, log: RequestLog) -> Progress:
    """A run's progress as MCP progress notifications (sent when the client asked for them
    with a progress token) and as `info` log messages."""
    changes = 0

    async def report(status: RunStatus, step: int) -> None:
        nonlocal changes
        changes += 1
        await ctx.session.report_progress(changes, None, f"run {status}, step {step}")
        await log.log("info", {"event": "run.progress", "status": status, "step": step})

    return report


async def _ping_everywhere(ctx: Context, call_next: Any) -> Any:
    """`ping` on every revision: 2026-07-28 dropped it, and its clients still send it."""
    if ctx.method != "ping":
        return await call_next(ctx)
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return {"resultType": "complete"}
    return {}


def _refusal(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


class AgencyMcp:
    """The MCP server of one app: `route` serves it, `running(app)` keeps it up."""

    def __init__(self, deps: ApiDeps) -> None:
        self._deps = deps
        self._tools = {tool.name: tool for tool in TOOLS}
        self._listing = types.ListToolsResult(tools=[_describe(t) for t in TOOLS])
        self._server: Server[Any] = Server(
            "agency",
            version=package_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            cache_hints=CACHE_HINTS,
        )
        # Registered here rather than as `on_set_logging_level`, which warns that the
        # 2026-07-28 revision deprecates it: 2025-11-25 clients still set their level so.
        self._server.add_request_handler(
            "logging/setLevel", types.SetLevelRequestParams, self._set_level
        )
        self._server.middleware.append(_ping_everywhere)
        self._levels = LogLevels()
        self._manager: StreamableHTTPSessionManager | None = None
        self._transport: httpx.ASGITransport | None = None
        self._stop = asyncio.Event()

    @asynccontextmanager
    async def running(self, app: Litestar) -> AsyncIterator[None]:
        """Serve MCP while the app runs; a manager runs once, so each run gets its own."""
        manager = StreamableHTTPSessionManager(
            self._server,
            stateless=True,
            max_request_body_size=self._deps.settings.max_body_bytes,
        )
        async with manager.run():
            self._manager = manager
            self._transport = httpx.ASGITransport(app=cast(Any, app))
            self._stop = closing_event(app.state)
            try:
                yield
            finally:
                self._manager = None
                self._transport = None

    def routes(self) -> list[BaseRouteHandler]:
        """`/mcp` and its protected-resource metadata."""
        return [self.route(), *metadata_routes(MCP_PATH)]

    def route(self) -> ASGIRouteHandler:
        @asgi(
            MCP_PATH,
            is_mount=True,
            copy_scope=True,
            opt=admission_opt(),
            exception_handlers={HTTPException: _jsonrpc_refusal},
        )
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            manager = self._manager
            if manager is None:
                await _unavailable(send)
                return
            await manager.handle_request(scope, receive, send)  # type: ignore[arg-type]

        return mcp_endpoint

    async def _list_tools(self, ctx: Context, params: Paging) -> types.ListToolsResult:
        return self._listing

    async def _call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = self._tools.get(params.name)
        if tool is None:
            raise MCPError(
                code=types.INVALID_PARAMS,
                message=f"unknown tool {params.name[:80]!r}; the tools are "
                + ", ".join(self._tools),
            )
        request = ctx.request
        if not isinstance(request, Request) or not isinstance(request.scope.get("user"), Principal):
            return _refusal("this server answers tool calls over its HTTP endpoint only")
        request_log = self._request_log(ctx, request)
        try:
            arguments = tool.arguments(params.arguments)
            async with self._client(request) as client:
                tenant = tenant_of(request.scope["user"])
                progress = _progress(ctx, request_log)
                operations = Operations(client, self._deps, tenant, self._stop, progress)
                result = await tool.run(operations, arguments)
        except InvalidArguments as e:
            return await self._refused(request_log, tool, str(e))
        except ApiError as e:
            return await self._refused(request_log, tool, f"{e.message} (HTTP {e.status})")
        except (StoreTimeout, NatsError, TimeoutError) as e:
            log.warning("mcp tool: the event store did not answer", tool=tool.name, error=str(e))
            message = "the event store did not answer in time; retry the call"
            return await self._refused(request_log, tool, message)
        if isinstance(result, RunOutcome):
            await request_log.outcome(result)
        structured = msgspec.to_builtins(result)
        return types.CallToolResult(
            content=[types.TextContent(text=msgspec.json.encode(structured).decode())],
            structured_content=structured,
        )

    async def _refused(
        self, request_log: RequestLog, tool: AgencyTool[Any, Any], message: str
    ) -> types.CallToolResult:
        await request_log.log(
            "warning", {"event": "tool.refused", "tool": tool.name, "error": message}
        )
        return _refusal(message)

    def _request_log(self, ctx: Context, request: Request) -> RequestLog:
        return RequestLog(ctx, self._levels, credential_of(request.headers))

    async def _set_level(
        self, ctx: Context, params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        self._levels.set(credential_of(_caller(ctx).headers), params.level)
        return types.EmptyResult()

    async def _list_resources(self, ctx: Context, params: Paging) -> types.ListResourcesResult:
        cursor = params.cursor if params is not None else None
        async with self._client(_caller(ctx)) as client:
            return await _answered(resources.list_files(client, cursor))

    async def _list_resource_templates(
        self, ctx: Context, params: Paging
    ) -> types.ListResourceTemplatesResult:
        return resources.TEMPLATES

    async def _read_resource(
        self, ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        async with self._client(_caller(ctx)) as client:
            return await _answered(
                resources.read_file(client, str(params.uri), ctx.protocol_version)
            )

    async def _list_prompts(self, ctx: Context, params: Paging) -> types.ListPromptsResult:
        async with self._client(_caller(ctx)) as client:
            return await _answered(prompts.list_prompts(client))

    async def _get_prompt(
        self, ctx: Context, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        async with self._client(_caller(ctx)) as client:
            return await _answered(prompts.get_prompt(client, params.name, params.arguments))

    def _client(self, request: Request) -> AsyncAgencyClient:
        """The API as the caller: their credential, over the in-process transport."""
        transport = self._transport
        if transport is None:
            raise ApiError(503, "the server is stopping", "POST", MCP_PATH)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
        headers = {name: request.headers[name] for name in _FORWARDED if name in request.headers}
        return AsyncAgencyClient(_IN_PROCESS, key, transport=transport, headers=headers)


T = TypeVar("T")


def _caller(ctx: Context) -> Request:
    """The HTTP request of an authenticated caller that carried this message."""
    request = ctx.request
    if not isinstance(request, Request) or not isinstance(request.scope.get("user"), Principal):
        raise MCPError(
            code=types.INVALID_REQUEST, message="this server answers over its HTTP endpoint only"
        )
    return request


async def _answered(work: Awaitable[T]) -> T:
    """What the API answered, or its refusal as the JSON-RPC error the client shows."""
    try:
        return await work
    except ApiError as e:
        code = types.INVALID_PARAMS if 400 <= e.status < 500 else types.INTERNAL_ERROR
        raise MCPError(code=code, message=f"{e.message} (HTTP {e.status})") from e
    except (StoreTimeout, NatsError, TimeoutError) as e:
        log.warning("mcp: the event store did not answer", error=str(e))
        raise MCPError(
            code=types.INTERNAL_ERROR,
            message="the event store did not answer in time; retry the request",
        ) from e


def _jsonrpc_refusal(request: Request_[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """A refusal of the API (401 for a bad key, 403, 413, …) with its status and headers,
    as the JSON-RPC error an MCP client reads and shows. A 401 names the protected-resource
    metadata and says why in its challenge, so a client need not guess at OAuth."""
    headers = dict(exc.headers or {})
    if exc.status_code == 401:
        headers["WWW-Authenticate"] = challenge(request, MCP_PATH, exc.detail)
    return Response(_jsonrpc_error(exc.detail), status_code=exc.status_code, headers=headers)


async def _unavailable(send: Send) -> None:
    body = msgspec.json.encode(_jsonrpc_error("the MCP server is not running; retry shortly"))
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _jsonrpc_error(message: str) -> dict[str, Any]:
    error = {"code": types.INVALID_REQUEST, "message": message}
    return {"jsonrpc": "2.0", "id": None, "error": error}
