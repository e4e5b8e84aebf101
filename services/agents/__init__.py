"""The extension API: tools, middleware, blueprints and the `AgentSystem` builder."""

from services.agents.middleware import Middleware, MiddlewareContext
from services.agents.system import AgentSystem
from services.agents.tools import (
    Tool,
    ToolContext,
    ToolFailed,
    ToolRetryable,
    TypedTool,
    define_tool,
    tool,
)

__all__ = [
    "AgentSystem",
    "Middleware",
    "MiddlewareContext",
    "Tool",
    "ToolContext",
    "ToolFailed",
    "ToolRetryable",
    "TypedTool",
    "define_tool",
    "tool",
]
