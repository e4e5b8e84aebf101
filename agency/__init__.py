"""Agency: the names an app imports to build its agent system.

    from agency import AgentSystem, BlueprintSpec, Middleware, ToolContext, tool

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

The public surface is this module, `agency.testing` (test an app in plain pytest) and
`agency.client` (a typed client of the HTTP API). Everything under `agency.services`,
`agency.contracts`, `agency.domain`, `agency.infra` and `agency.projections` is the
system's own and changes without notice.

The names load on first use, so that `import agency` (and the `agency` command) stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agency.contracts.events import (
        ChatMessage as ChatMessage,
        Todo as Todo,
        ToolCall as ToolCall,
    )
    from agency.contracts.events.blueprint import (
        BlueprintConfig as BlueprintConfig,
        BlueprintSpec as BlueprintSpec,
        HitlConfig as HitlConfig,
        ImmediateConfig as ImmediateConfig,
        SessionToolBinding as SessionToolBinding,
        SideConfig as SideConfig,
        SubagentEntry as SubagentEntry,
        SubagentsConfig as SubagentsConfig,
    )
    from agency.contracts.events.tool_servers import (
        McpServer as McpServer,
        RemoteAgent as RemoteAgent,
    )
    from agency.services.agents.checks import (
        BlueprintInvalid as BlueprintInvalid,
    )
    from agency.services.agents.code import (
        CodeAgent as CodeAgent,
        SettingsError as SettingsError,
        ToolCallError as ToolCallError,
    )
    from agency.services.agents.code_ai import (
        StreamingAi as StreamingAi,
    )
    from agency.services.agents.code_context import (
        AgentContext as AgentContext,
        AgentReply as AgentReply,
        AgentTools as AgentTools,
    )
    from agency.services.agents.escalation import (
        NotAChild as NotAChild,
    )
    from agency.services.agents.isolation import (
        Isolation as Isolation,
        NotIsolatable as NotIsolatable,
    )
    from agency.services.agents.middleware import (
        ChildReport as ChildReport,
        Middleware as Middleware,
        MiddlewareContext as MiddlewareContext,
        ModelPlan as ModelPlan,
    )
    from agency.services.agents.system import (
        AgentSystem as AgentSystem,
        SystemLoadError as SystemLoadError,
    )
    from agency.services.agents.tools import (
        StateTool as StateTool,
        StateToolOutcome as StateToolOutcome,
        Tool as Tool,
        ToolContext as ToolContext,
        ToolFailed as ToolFailed,
        ToolRetryable as ToolRetryable,
        ToolSpec as ToolSpec,
        WorkflowTools as WorkflowTools,
        define_tool as define_tool,
    )
    from agency.services.agents.typed_tools import (
        TypedTool as TypedTool,
        tool as tool,
    )
    from agency.services.agents.view import (
        ChildView as ChildView,
        ThreadView as ThreadView,
    )

# Each public name and the module that defines it.
_WHERE: dict[str, str] = {
    "AgentContext": "agency.services.agents.code_context",
    "AgentReply": "agency.services.agents.code_context",
    "AgentSystem": "agency.services.agents.system",
    "AgentTools": "agency.services.agents.code_context",
    "BlueprintConfig": "agency.contracts.events.blueprint",
    "BlueprintInvalid": "agency.services.agents.checks",
    "BlueprintSpec": "agency.contracts.events.blueprint",
    "ChatMessage": "agency.contracts.events",
    "ChildReport": "agency.services.agents.middleware",
    "ChildView": "agency.services.agents.view",
    "CodeAgent": "agency.services.agents.code",
    "HitlConfig": "agency.contracts.events.blueprint",
    "ImmediateConfig": "agency.contracts.events.blueprint",
    "Isolation": "agency.services.agents.isolation",
    "McpServer": "agency.contracts.events.tool_servers",
    "Middleware": "agency.services.agents.middleware",
    "MiddlewareContext": "agency.services.agents.middleware",
    "ModelPlan": "agency.services.agents.middleware",
    "NotAChild": "agency.services.agents.escalation",
    "NotIsolatable": "agency.services.agents.isolation",
    "RemoteAgent": "agency.contracts.events.tool_servers",
    "SessionToolBinding": "agency.contracts.events.blueprint",
    "SettingsError": "agency.services.agents.code",
    "SideConfig": "agency.contracts.events.blueprint",
    "StateTool": "agency.services.agents.tools",
    "StateToolOutcome": "agency.services.agents.tools",
    "StreamingAi": "agency.services.agents.code_ai",
    "SubagentEntry": "agency.contracts.events.blueprint",
    "SubagentsConfig": "agency.contracts.events.blueprint",
    "SystemLoadError": "agency.services.agents.system",
    "ThreadView": "agency.services.agents.view",
    "Todo": "agency.contracts.events",
    "Tool": "agency.services.agents.tools",
    "ToolCall": "agency.contracts.events",
    "ToolCallError": "agency.services.agents.code",
    "ToolContext": "agency.services.agents.tools",
    "ToolFailed": "agency.services.agents.tools",
    "ToolRetryable": "agency.services.agents.tools",
    "ToolSpec": "agency.services.agents.tools",
    "TypedTool": "agency.services.agents.typed_tools",
    "WorkflowTools": "agency.services.agents.tools",
    "define_tool": "agency.services.agents.tools",
    "tool": "agency.services.agents.typed_tools",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'agency' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
