"""Agency as an MCP server: `/mcp` on the HTTP API, over streamable HTTP.

The endpoint sits behind the API's own authentication (a tenant's API key as
`Authorization: Bearer`, or `X-SECRET`), so a bad key is refused with the API's 401 before
MCP sees the request. The tools (`mcp_tools`) call the API's routes in-process with the
caller's credential. The server is stateless: every request stands alone, so any API
process can answer it. The session manager runs inside the app's lifespan and stops with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx
import mcp_types as types
import msgspec
import structlog
from litestar import Litestar, Request as Request_, Response, asgi
from litestar.exceptions import HTTPException
from litestar.handlers import ASGIRouteHandler
from litestar.types import Receive, Scope, Send
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from nats.errors import Error as NatsError
from starlette.requests import Request

from agency.contracts.http import RunStatus
from agency.contracts.version import package_version
from agency.infra.jetstream.errors import StoreTimeout
from agency.services.api.admission_door import admission_opt
from agency.services.api.auth import tenant_of
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.mcp_tools import TOOLS, AgencyTool, InvalidArguments, Operations
from agency.services.api.run_outcome import Progress
from agency.services.api.streaming import closing_event
from agency.services.client import ApiError, AsyncAgencyClient

log = structlog.get_logger(__name__)

# What a handler is given: `request` is the HTTP request that carried the message.
Context = ServerRequestContext[Any, Any]

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


def _progress(ctx: Context) -> Progress:
    """A run's progress as MCP progress notifications (sent when the client asked for them
    with a progress token)."""
    changes = 0

    async def report(status: RunStatus, step: int) -> None:
        nonlocal changes
        changes += 1
        await ctx.session.report_progress(changes, None, f"run {status}, step {step}")

    return report


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
        )
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

    async def _list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
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
        try:
            arguments = tool.arguments(params.arguments)
            async with self._client(request) as client:
                tenant = tenant_of(request.scope["user"])
                operations = Operations(client, self._deps, tenant, self._stop, _progress(ctx))
                result = await tool.run(operations, arguments)
        except InvalidArguments as e:
            return _refusal(str(e))
        except ApiError as e:
            return _refusal(f"{e.message} (HTTP {e.status})")
        except (StoreTimeout, NatsError, TimeoutError) as e:
            log.warning("mcp tool: the event store did not answer", tool=tool.name, error=str(e))
            return _refusal("the event store did not answer in time; retry the call")
        structured = msgspec.to_builtins(result)
        return types.CallToolResult(
            content=[types.TextContent(text=msgspec.json.encode(structured).decode())],
            structured_content=structured,
        )

    def _client(self, request: Request) -> AsyncAgencyClient:
        """The API as the caller: their credential, over the in-process transport."""
        transport = self._transport
        if transport is None:
            raise ApiError(503, "the server is stopping", "POST", MCP_PATH)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        key = token.strip() if scheme.lower() == "bearer" else ""
        headers = {name: request.headers[name] for name in _FORWARDED if name in request.headers}
        return AsyncAgencyClient(_IN_PROCESS, key, transport=transport, headers=headers)


def _jsonrpc_refusal(_: Request_[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """A refusal of the API (401 for a bad key, 403, 413, …) with its status and headers,
    as the JSON-RPC error an MCP client reads and shows."""
    return Response(_jsonrpc_error(exc.detail), status_code=exc.status_code, headers=exc.headers)


async def _unavailable(send: Send) -> None:
    body = msgspec.json.encode(_jsonrpc_error("the MCP server is not running; retry shortly"))
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _jsonrpc_error(message: str) -> dict[str, Any]:
    error = {"code": types.INVALID_REQUEST, "message": message}
    return {"jsonrpc": "2.0", "id": None, "error": error}
