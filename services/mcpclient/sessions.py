"""MCP client sessions: one per server configuration, shared by every call in the process.

The SDK's transports are anyio context managers that must be left in the task that entered
them, so each session lives in a task of its own (`_Connection._hold`) and calls from any
task go through it. A session opens on first use (connecting is retried under the shared
retry policy), is dropped when its transport fails and opened afresh by the next call, and
a request the server refuses for an unknown session (it restarted) is sent once more on a
new one; an HTTP server is reached only where the egress policy allows
(`services/egress.py`: checked before opening, and on every connection), a refusal
raised as `EgressRefused` and never retried; `aclose()` closes every one of them within a
bounded time; a stdio server's process is stopped with its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any, Self

import httpx2
import structlog
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CONNECTION_CLOSED,
    INVALID_REQUEST,
    CallToolResult,
    PaginatedRequestParams,
    Tool as ListedTool,
)

from agency.infra.retry import RetryPolicy
from agency.services.egress import EgressPolicy, guarded_transport
from agency.services.mcpclient.config import Endpoint

log = structlog.get_logger(__name__)

CONNECT_RETRY = RetryPolicy(attempts=3, timeout=15.0, wait_initial=0.2, wait_max=2.0)
OPEN_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
_MAX_PAGES = 50


class McpUnavailable(Exception):
    """No session could be opened with the server (down, refused, failed its handshake)."""

    def __init__(self, endpoint: Endpoint, detail: str) -> None:
        self.endpoint = endpoint
        super().__init__(f"MCP server {endpoint.describe()} is unreachable: {detail}")


class McpSessionLost(Exception):
    """The session broke while a request was in flight; the request's outcome is unknown."""

    def __init__(self, endpoint: Endpoint, detail: str) -> None:
        self.endpoint = endpoint
        super().__init__(f"the session with MCP server {endpoint.describe()} broke: {detail}")


class McpSessionExpired(McpSessionLost):
    """The server no longer knows the session (it restarted, or ended the session): the
    request was refused unrun, so it is sent again on a new session."""


class McpSessions:
    """The process's MCP sessions, keyed by resolved server configuration."""

    def __init__(
        self,
        *,
        open_timeout: float = OPEN_TIMEOUT,
        egress: EgressPolicy | None = None,
        own_urls: tuple[str, ...] = (),
    ) -> None:
        self._open_timeout = open_timeout
        # The policy given, or the environment's (`AGENCY_ALLOW_HOSTS`) as each session
        # opens; `own_urls` are the system's own servers, never reached for a tenant.
        self._egress = egress
        self._own_urls = own_urls
        self._connections: dict[Endpoint, _Connection] = {}
        self._locks: dict[Endpoint, asyncio.Lock] = {}
        # Dropped connections still winding down, held until they have (and by `aclose`).
        self._retired: set[_Connection] = set()
        self._closed = False

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def list_tools(self, endpoint: Endpoint) -> list[ListedTool]:
        """Every tool of the server, page by page."""
        try:
            return await self._list_tools(endpoint)
        except McpSessionExpired:
            return await self._list_tools(endpoint)

    async def call_tool(
        self, endpoint: Endpoint, tool: str, arguments: dict[str, Any], *, timeout: float
    ) -> CallToolResult:
        try:
            return await self._call_tool(endpoint, tool, arguments, timeout)
        except McpSessionExpired:
            return await self._call_tool(endpoint, tool, arguments, timeout)

    async def _list_tools(self, endpoint: Endpoint) -> list[ListedTool]:
        async with self._using(endpoint) as session:
            tools: list[ListedTool] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
                page = await session.list_tools(params=params)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools

    async def _call_tool(
        self, endpoint: Endpoint, tool: str, arguments: dict[str, Any], timeout: float
    ) -> CallToolResult:
        async with self._using(endpoint) as session:
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout)

    async def aclose(self) -> None:
        """Close every session (idempotent); each gets `CLOSE_TIMEOUT` seconds."""
        self._closed = True
        connections, self._connections = list(self._connections.values()), {}
        retired, self._retired = list(self._retired), set()
        await asyncio.gather(*(c.close() for c in (*connections, *retired)))

    @contextlib.asynccontextmanager
    async def _using(self, endpoint: Endpoint) -> AsyncIterator[ClientSession]:
        connection = await self._connection(endpoint)
        try:
            yield connection.session
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self._discard(connection)
                raise McpSessionLost(endpoint, e.message) from e
            if _session_unknown(e):
                self._discard(connection)
                raise McpSessionExpired(endpoint, e.message) from e
            raise  # the server answered with an error: the session is fine
        except (TimeoutError, asyncio.CancelledError):
            raise  # the caller's limit, or its cancellation: not the session's fault
        except Exception as e:
            if connection.alive:
                raise  # the SDK refused something of this call; the session is fine
            self._discard(connection)
            raise McpSessionLost(endpoint, _describe(e)) from e
        if not connection.alive:
            self._discard(connection)

    async def _connection(self, endpoint: Endpoint) -> _Connection:
        lock = self._locks.setdefault(endpoint, asyncio.Lock())
        async with lock:
            current = self._connections.get(endpoint)
            if current is not None and current.alive:
                return current
            if current is not None:
                self._discard(current)
            connection = await CONNECT_RETRY.call(
                lambda e: isinstance(e, McpUnavailable), self._open, endpoint
            )
            self._connections[endpoint] = connection
            return connection

    async def _open(self, endpoint: Endpoint) -> _Connection:
        if self._closed:
            raise RuntimeError("the MCP sessions are closed")
        egress = self._egress or EgressPolicy.from_env(own_urls=self._own_urls)
        if endpoint.url:
            # A clear refusal before any connection; the transport checks each one again.
            await egress.check_url(endpoint.url)
        connection = _Connection(endpoint, egress)
        await connection.open(self._open_timeout)
        if self._closed:  # closed while this one opened
            await connection.close()
            raise RuntimeError("the MCP sessions are closed")
        return connection

    def _discard(self, connection: _Connection) -> None:
        if self._connections.get(connection.endpoint) is connection:
            del self._connections[connection.endpoint]
        self._retired = {c for c in self._retired if not c.ended}
        self._retired.add(connection)
        connection.stop()


class _Connection:
    """One session, held open by a task of its own until `close`."""

    def __init__(self, endpoint: Endpoint, egress: EgressPolicy) -> None:
        self.endpoint = endpoint
        self._egress = egress
        self._session: ClientSession | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def session(self) -> ClientSession:
        assert self._session is not None, "open() first"
        return self._session

    @property
    def ended(self) -> bool:
        return self._task is None or self._task.done()

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing.is_set()

    async def open(self, timeout: float) -> None:
        self._task = asyncio.create_task(self._hold(), name=f"mcp-session-{self.endpoint.name}")
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._ready)
        except TimeoutError:
            await self.close()
            raise McpUnavailable(
                self.endpoint, f"no session within {timeout:g} s (connect and initialize)"
            ) from None
        except BaseException:
            await self.close()
            raise

    def stop(self) -> None:
        """Ask the session to end; `close` waits for it."""
        self._closing.set()

    async def close(self) -> None:
        self._closing.set()
        task = self._task
        if task is None or task.done():
            return
        done, _ = await asyncio.wait([task], timeout=CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            await asyncio.wait([task], timeout=CLOSE_TIMEOUT)

    async def _hold(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await _transport(stack, self.endpoint, self._egress)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._session = session
                self._ready.set_result(None)
                log.info("MCP session opened", server=self.endpoint.name)
                await self._closing.wait()
        except Exception as e:
            if not self._ready.done():
                self._ready.set_exception(McpUnavailable(self.endpoint, _describe(e)))
            else:
                log.warning("MCP session ended", server=self.endpoint.name, error=_describe(e))
        finally:
            if not self._ready.done():
                self._ready.set_exception(McpUnavailable(self.endpoint, "closed while opening"))
            # Nobody awaits a failed open after a timeout: mark its error as seen.
            if self._ready.done() and not self._ready.cancelled():
                self._ready.exception()


async def _transport(
    stack: contextlib.AsyncExitStack, endpoint: Endpoint, egress: EgressPolicy
) -> tuple[Any, Any]:
    if endpoint.url:
        # The SDK's own client, but connecting through the egress policy, never through a
        # proxy named by the environment, and following no redirect itself (the SDK follows
        # one within the endpoint's origin; each new connection is checked).
        client = httpx2.AsyncClient(
            headers=dict(endpoint.headers),
            timeout=httpx2.Timeout(OPEN_TIMEOUT, read=300.0),
            transport=guarded_transport(egress),
            trust_env=False,
            follow_redirects=False,
        )
        await stack.enter_async_context(client)
        return await stack.enter_async_context(
            streamable_http_client(endpoint.url, http_client=client)
        )
    params = StdioServerParameters(
        command=endpoint.command[0], args=list(endpoint.command[1:]), env=dict(endpoint.env)
    )
    errlog = sys.__stderr__ if sys.__stderr__ is not None else sys.stderr
    return await stack.enter_async_context(stdio_client(params, errlog=errlog))


def _session_unknown(error: MCPError) -> bool:
    # HTTP 404 to a request with a session id; the SDK hands it over as this error (with
    # the server's own wording when it sent a JSON-RPC body).
    return error.code == INVALID_REQUEST and "session" in error.message.lower()


def _describe(error: BaseException) -> str:
    """The innermost meaningful error of what the SDK raised (often an exception group)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    message = str(error)
    return f"{type(error).__name__}: {message}" if message else type(error).__name__
