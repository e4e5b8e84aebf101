"""Where the runtime gets the tools that live outside the agent system: MCP servers' and
remote A2A agents' (ports; the live ones are `services.mcpclient` and `services.a2aclient`,
the replay's are recorded)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from agency.contracts.events import McpServer, RemoteAgent
from agency.services.agents.tools import Tool


class McpTools(Protocol):
    """Where the runtime gets MCP servers' tools (`services.mcpclient.McpCatalog`)."""

    async def tools(self, servers: Iterable[McpServer]) -> dict[str, Tool]: ...


class RemoteAgentTools(Protocol):
    """Where the runtime gets remote A2A agents' tools (`services.a2aclient`)."""

    async def tools(self, agents: Iterable[RemoteAgent]) -> dict[str, Tool]: ...
