"""Tool calls: requested by the runtime, executed by the tools service, one result per id."""

from __future__ import annotations

from contracts.events.base import Event, ToolCall


class ToolRequested(Event, frozen=True, kw_only=True, tag="tool.requested"):
    run_id: str
    step: int
    call: ToolCall
    timeout_ms: int = 30_000
    max_attempts: int = 3


class ToolStarted(Event, frozen=True, kw_only=True, tag="tool.started"):
    run_id: str
    tool_call_id: str
    tool_name: str
    arguments: str
    attempt: int = 1


class ToolOutput(Event, frozen=True, kw_only=True, tag="tool.output"):
    run_id: str
    tool_call_id: str
    tool_name: str
    output: str


class ToolError(Event, frozen=True, kw_only=True, tag="tool.error"):
    """The call failed for good; the model sees `error` as the tool's answer."""

    run_id: str
    tool_call_id: str
    tool_name: str
    error: str
    attempts: int = 1


TOOL_RESULT_TYPES: frozenset[str] = frozenset({"tool.output", "tool.error"})

ToolEvent = ToolRequested | ToolStarted | ToolOutput | ToolError
