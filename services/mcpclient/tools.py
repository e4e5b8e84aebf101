"""MCP tools as agent tools: listed for the model, called for the tools service.

`McpCatalog.tools(servers)` answers the tools of the servers a blueprint names, each a `Tool`
named `<server>__<tool>` (`config.exposed_name`) with the server's description and JSON
schema, and `mcp` set so the runtime's `tool.requested` says which server and tool to call.
A server's list is fetched within `list_timeout` seconds and kept for `ttl` seconds; when a
fetch fails the last list is kept, and a server never listed is offered without tools
(tried again after `retry_after` seconds), so an unreachable server never holds a run up.

`mcp_tool(sessions, ref)` is the tool the tools service runs for a `tool.requested`
carrying `mcp`: it calls the server through the process's sessions. What the server
answers becomes the call's output; its `isError` answers, its JSON-RPC errors and failures
to connect become `ToolFailed` (one `tool.error`, the text for the model); a session that
broke mid-call becomes `ToolRetryable` and the server's request timeout a `TimeoutError`,
both retried within the call's attempt budget.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import msgspec
import structlog
from mcp.shared.exceptions import MCPError
from mcp.types import (
    REQUEST_TIMEOUT,
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from agency.contracts.events import McpServer, McpToolRef
from agency.services.agents.tools import Tool, ToolContext, ToolFailed, ToolRetryable, ToolSpec
from agency.services.egress import EgressRefused
from agency.services.mcpclient.config import McpConfigError, exposed_name, resolve
from agency.services.mcpclient.sessions import McpSessionLost, McpSessions, McpUnavailable

log = structlog.get_logger(__name__)

DEFAULT_TTL = 60.0
DEFAULT_LIST_TIMEOUT = 10.0
DEFAULT_RETRY_AFTER = 30.0


@dataclass(frozen=True, slots=True)
class _Listing:
    tools: dict[str, Tool]
    at: float
    ok: bool


@dataclass(eq=False)
class McpCatalog:
    """The tools of MCP servers, cached per server configuration."""

    sessions: McpSessions
    _: KW_ONLY
    ttl: float = DEFAULT_TTL
    list_timeout: float = DEFAULT_LIST_TIMEOUT
    retry_after: float = DEFAULT_RETRY_AFTER
    _listings: dict[bytes, _Listing] = field(default_factory=dict, init=False)
    _locks: dict[bytes, asyncio.Lock] = field(default_factory=dict, init=False)

    @classmethod
    def from_env(cls, sessions: McpSessions) -> McpCatalog:
        """`AGENCY_MCP_TOOLS_TTL` (seconds a list is kept, default 60) and
        `AGENCY_MCP_LIST_TIMEOUT` (seconds a list may take, default 10)."""
        return cls(
            sessions,
            ttl=float(os.environ.get("AGENCY_MCP_TOOLS_TTL", DEFAULT_TTL)),
            list_timeout=float(os.environ.get("AGENCY_MCP_LIST_TIMEOUT", DEFAULT_LIST_TIMEOUT)),
        )

    async def tools(self, servers: Iterable[McpServer]) -> dict[str, Tool]:
        servers = list(servers)
        if not servers:
            return {}
        listed = await asyncio.gather(*(self._server_tools(s) for s in servers))
        merged: dict[str, Tool] = {}
        for tools in listed:
            merged.update(tools)
        return merged

    async def aclose(self) -> None:
        await self.sessions.aclose()

    async def _server_tools(self, server: McpServer) -> dict[str, Tool]:
        key = msgspec.json.encode(server)
        loop = asyncio.get_running_loop()
        async with self._locks.setdefault(key, asyncio.Lock()):
            cached = self._listings.get(key)
            if cached is not None:
                age = loop.time() - cached.at
                if age < (self.ttl if cached.ok else self.retry_after):
                    return cached.tools
            try:
                async with asyncio.timeout(self.list_timeout):
                    tools = await self._list(server)
            except EgressRefused:
                raise  # not the server's doing: a run may not use it, and ends saying why
            except Exception as e:  # whatever a server does, the run goes on without it
                stale = cached.tools if cached is not None else {}
                log.warning(
                    "MCP server's tools not listed; offering its last known list",
                    server=server.name,
                    error=str(e) or f"no list within {self.list_timeout:g} s",
                    tools=len(stale),
                )
                self._listings[key] = _Listing(stale, loop.time(), ok=False)
                return stale
            self._listings[key] = _Listing(tools, loop.time(), ok=True)
            return tools

    async def _list(self, server: McpServer) -> dict[str, Tool]:
        listed = await self.sessions.list_tools(resolve(server))
        wanted = set(server.tools)
        tools: dict[str, Tool] = {}
        for item in listed:
            if wanted and item.name not in wanted:
                continue
            name = exposed_name(server.name, item.name)
            spec = ToolSpec(
                name=name, description=item.description or "", parameters=item.input_schema
            )
            tools[name] = mcp_tool(self.sessions, McpToolRef(server=server, tool=item.name), spec)
        return tools


def mcp_tool(sessions: McpSessions, ref: McpToolRef, spec: ToolSpec | None = None) -> Tool:
    """The agent tool that calls `ref` through `sessions`."""
    server = ref.server

    async def call(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            endpoint = resolve(server)
            result = await sessions.call_tool(endpoint, ref.tool, args, timeout=server.timeout)
        except (McpConfigError, McpUnavailable, EgressRefused) as e:
            raise ToolFailed(str(e)) from e
        except McpSessionLost as e:
            raise ToolRetryable(str(e)) from e
        except MCPError as e:
            if e.code == REQUEST_TIMEOUT:  # the call's own limit, retried like any timeout
                raise TimeoutError(f"MCP tool {ref.tool!r} timed out: {e.message}") from e
            raise ToolFailed(
                f"MCP server {server.name!r} refused the call to {ref.tool!r}: {e.message}"
            ) from e
        text = result_text(result)
        if result.is_error:
            raise ToolFailed(
                f"MCP tool {ref.tool!r} of server {server.name!r} failed: {text or 'no detail'}"
            )
        return text

    return Tool(
        spec=spec or ToolSpec(name=exposed_name(server.name, ref.tool)),
        fn=call,
        timeout=server.timeout,
        mcp=ref,
    )


def result_text(result: CallToolResult) -> str:
    """What the model reads of an MCP result: its text blocks, and a note for the rest."""
    parts: list[str] = []
    for block in result.content:
        match block:
            case TextContent(text=text):
                parts.append(text)
            case ImageContent(mime_type=mime) | AudioContent(mime_type=mime):
                parts.append(f"[{block.type}: {mime}, not shown]")
            case EmbeddedResource(resource=TextResourceContents(text=text)):
                parts.append(text)
            case EmbeddedResource(resource=resource):
                parts.append(f"[resource {resource.uri}, binary, not shown]")
            case ResourceLink(uri=uri):
                parts.append(f"[resource {uri}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False, default=str)
    return "\n".join(parts)
