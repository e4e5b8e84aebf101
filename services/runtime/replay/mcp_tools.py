"""MCP tools and remote agents' tools for re-execution, rebuilt from the record instead of
asking the servers (or reading the agents' cards).

The live runtime wrote each MCP call's server and tool into `tool.requested.mcp` (each
remote agent's call, the agent, into `tool.requested.remote_agent`); offering
the same names with the same `mcp`, timeout and attempts makes the re-executed runtime
request the same calls, whatever the servers (if still there) list today. Results are
recorded inputs, so nothing is ever called.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from agency.contracts.events import McpServer, RemoteAgent, ToolRequested
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.tools import Tool, ToolContext, ToolFailed, ToolSpec


class RecordedTools:
    """The tools a thread's record shows it requested `where` (of MCP servers, of remote
    agents), by the name the model called; offered for the servers or agents a blueprint
    names (as `McpTools` and `RemoteAgentTools` offer them)."""

    def __init__(
        self, events: Iterable[RecordedEvent], where: Literal["mcp", "remote_agent"]
    ) -> None:
        self._tools = _recorded(events, where)

    async def tools(self, named: Iterable[McpServer | RemoteAgent]) -> dict[str, Tool]:
        names = {source.name for source in named}
        return {name: tool for name, tool in self._tools.items() if _source(tool) in names}


def _source(tool: Tool) -> str | None:
    """The name of the MCP server or remote agent a recorded tool was called on."""
    if tool.mcp is not None:
        return tool.mcp.server.name
    return tool.remote_agent.name if tool.remote_agent is not None else None


def _recorded(
    events: Iterable[RecordedEvent], where: Literal["mcp", "remote_agent"]
) -> dict[str, Tool]:
    """The tools of the calls the record shows made `where` (an MCP server, a remote
    agent), by the name the model called, offered as they were: timeout, attempts, target."""
    tools: dict[str, Tool] = {}
    for event in events:
        request = event.payload
        if isinstance(request, ToolRequested) and getattr(request, where) is not None:
            tools[request.call.name] = Tool(
                spec=ToolSpec(name=request.call.name),
                fn=_not_called,
                timeout=request.timeout_ms / 1000,
                max_attempts=request.max_attempts,
                **{where: getattr(request, where)},
            )
    return tools


def _not_called(args: dict[str, Any], ctx: ToolContext) -> None:
    raise ToolFailed("re-execution does not call MCP servers or remote agents")
