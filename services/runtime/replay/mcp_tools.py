"""MCP tools for re-execution, rebuilt from the record instead of asking the servers.

The live runtime wrote each MCP call's server and tool into `tool.requested.mcp`; offering
the same names with the same `mcp`, timeout and attempts makes the re-executed runtime
request the same calls, whatever the servers (if still there) list today. Results are
recorded inputs, so nothing is ever called.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agency.contracts.events import McpServer, ToolRequested
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.tools import Tool, ToolContext, ToolFailed, ToolSpec


class RecordedMcpTools:
    """The MCP tools a thread's record shows it requested, by the name the model called."""

    def __init__(self, events: Iterable[RecordedEvent]) -> None:
        self._tools: dict[str, Tool] = {}
        for event in events:
            request = event.payload
            if isinstance(request, ToolRequested) and request.mcp is not None:
                self._tools[request.call.name] = Tool(
                    spec=ToolSpec(name=request.call.name),
                    fn=_not_called,
                    timeout=request.timeout_ms / 1000,
                    max_attempts=request.max_attempts,
                    mcp=request.mcp,
                )

    async def tools(self, servers: Iterable[McpServer]) -> dict[str, Tool]:
        names = {server.name for server in servers}
        return {
            name: tool
            for name, tool in self._tools.items()
            if tool.mcp is not None and tool.mcp.server.name in names
        }


def _not_called(args: dict[str, Any], ctx: ToolContext) -> None:
    raise ToolFailed("re-execution does not call MCP servers")
