"""The extension API of Agency: what an app imports to build its agent system.

    from services.agents import AgentSystem, BlueprintSpec, Middleware, ToolContext, tool

    @tool
    async def lookup(ctx: ToolContext, city: str) -> str:
        \"\"\"The weather of a city.\"\"\"
        return f"sunny in {city}"

    system = (
        AgentSystem()
        .defaults()
        .add_tool(lookup, ["weather"])
        .add_agent(BlueprintSpec(name="forecaster", prompt="...", tags=("default", "weather")))
    )

Everything an app needs is here: the builder (`AgentSystem`), tools (`tool`,
`define_tool`, their context and errors), middleware (its hooks, its context and the
read-only `ThreadView` of the thread it sees), blueprints and their config sections, code
agents and their context, and the errors each raises. The services run what an app builds;
an app never imports them.
"""

from contracts.events import ChatMessage, Todo, ToolCall
from contracts.events.registry import (
    BlueprintConfig,
    BlueprintSpec,
    HitlConfig,
    ImmediateConfig,
    McpServer,
    SessionToolBinding,
    SideConfig,
    SubagentEntry,
    SubagentsConfig,
)
from services.agents.checks import BlueprintInvalid
from services.agents.code import CodeAgent, SettingsError, ToolCallError
from services.agents.code_ai import StreamingAi
from services.agents.code_context import AgentContext, AgentReply, AgentTools
from services.agents.escalation import NotAChild
from services.agents.isolation import Isolation, NotIsolatable
from services.agents.middleware import ChildReport, Middleware, MiddlewareContext, ModelPlan
from services.agents.system import AgentSystem, SystemLoadError
from services.agents.tools import (
    StateTool,
    StateToolOutcome,
    Tool,
    ToolContext,
    ToolFailed,
    ToolRetryable,
    ToolSpec,
    TypedTool,
    WorkflowTools,
    define_tool,
    tool,
)
from services.agents.view import ChildView, ThreadView

__all__ = [
    "AgentContext",
    "AgentReply",
    "AgentSystem",
    "AgentTools",
    "BlueprintConfig",
    "BlueprintInvalid",
    "BlueprintSpec",
    "ChatMessage",
    "ChildReport",
    "ChildView",
    "CodeAgent",
    "HitlConfig",
    "ImmediateConfig",
    "Isolation",
    "McpServer",
    "Middleware",
    "MiddlewareContext",
    "ModelPlan",
    "NotAChild",
    "NotIsolatable",
    "SessionToolBinding",
    "SettingsError",
    "SideConfig",
    "StateTool",
    "StateToolOutcome",
    "StreamingAi",
    "SubagentEntry",
    "SubagentsConfig",
    "SystemLoadError",
    "ThreadView",
    "Todo",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolContext",
    "ToolFailed",
    "ToolRetryable",
    "ToolSpec",
    "TypedTool",
    "WorkflowTools",
    "define_tool",
    "tool",
]
