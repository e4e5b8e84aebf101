"""Tool calls: requested by the runtime, executed by the tools service, one result per id."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agency.contracts.events.base import Event, InRun, ToolCall
from agency.contracts.events.tool_servers import McpServer, RemoteAgent


class McpToolRef(msgspec.Struct, frozen=True, kw_only=True):
    """The MCP tool a call runs: the server as configured (references, never resolved
    secrets) and the tool's own name there."""

    server: McpServer
    tool: str


class ToolRequested(InRun, frozen=True, kw_only=True, tag="tool.requested"):
    """`mcp` is set when the call runs a tool of an MCP server, `remote_agent` when it sends
    a message to a remote A2A agent (as configured: references, never resolved secrets)."""

    step: int
    call: ToolCall
    timeout_ms: int = 30_000
    max_attempts: int = 3
    mcp: McpToolRef | None = None
    remote_agent: RemoteAgent | None = None


class ToolStarted(InRun, frozen=True, kw_only=True, tag="tool.started"):
    tool_call_id: str
    tool_name: str
    arguments: str
    attempt: int = 1


class ToolOutput(InRun, frozen=True, kw_only=True, tag="tool.output"):
    """`remote_context_id`: for a call to a remote A2A agent, the remote conversation
    (`contextId`) the answer belongs to; the thread's next call to that agent continues it.
    `remote_task_id`: the agent's task that asked for input, which that call answers."""

    tool_call_id: str
    tool_name: str
    output: str
    remote_context_id: str = ""
    remote_task_id: str = ""


class ToolError(InRun, frozen=True, kw_only=True, tag="tool.error"):
    """The call failed for good; the model sees `error` as the tool's answer.

    `raised_at`: where the tool raised, if it did: the innermost line of the app's own code
    the exception passed through, `path/to/file.py, line 12, in fn` (at most
    `MAX_RAISED_AT_CHARS`); empty for any other failure. The model is not shown it."""

    tool_call_id: str
    tool_name: str
    error: str
    attempts: int = 1
    raised_at: str = ""


class ToolRegistered(Event, frozen=True, kw_only=True, tag="tool.registered"):
    """A middleware made a tool available to the thread's model from here on
    (`ctx.register_tool`). The spec is what the model is shown; the tool runs as the
    middleware's registrable tool of that name: in the runtime (`state`) or the tools
    service (`external`)."""

    run_id: str | None = None
    middleware: str
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    kind: Literal["state", "external"] = "external"


MAX_RAISED_AT_CHARS = 512

TOOL_RESULT_TYPES: frozenset[str] = frozenset({"tool.output", "tool.error"})

ToolEvent = ToolRequested | ToolStarted | ToolOutput | ToolError | ToolRegistered
