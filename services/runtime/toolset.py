"""The tools a thread's model is offered at this moment, and what each name runs.

Beyond the blueprint's tools (by tags) and its middleware's: `task` and the resumable
lifecycle tools only when the blueprint names subagent types; a tool per exposed agent the
blueprint lists in `callableAgents`; the tools of the MCP servers it names (listed by the
runtime's `McpCatalog`, `services/mcpclient/`); `notify_parent` and `set_status` for a
child whose parent communication is explicit; and, in a dual-AI session, the lifecycle
tools of the side holding the floor.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agency.contracts.events import BlueprintSpec, SessionToolBinding, SideConfig, ToolCall
from agency.domain.thread_state import ThreadState
from agency.services.agents.builtin.parent import escalation_tools
from agency.services.agents.builtin.subagents import (
    CREATE_TOOL,
    RESUMABLE_TOOLS,
    TASK_TOOL,
    SubagentType,
    agent_env,
    subagent_types,
)
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import AgentTool, SessionTool, SubagentTool, Tool, ToolSpec
from agency.services.tool_execution.registered import AnyTool, registered_tools


def side_config(blueprint: BlueprintSpec, side: str | None) -> SideConfig | None:
    if blueprint.type != "dual_ai" or side is None:
        return None
    return blueprint.side_a if side == "A" else blueprint.side_b


def _binding(binding: str | SessionToolBinding) -> SessionToolBinding:
    return SessionToolBinding(name=binding) if isinstance(binding, str) else binding


def _session_tool(binding: str | SessionToolBinding, action: str, what: str) -> SessionTool:
    b = _binding(binding)
    properties: dict[str, object] = {b.message_property: {"type": "string", "description": what}}
    if b.attachments_property:
        properties[b.attachments_property] = {"type": "array", "items": {"type": "string"}}
    spec = ToolSpec(
        name=b.name,
        description=what,
        parameters={"type": "object", "properties": properties, "required": [b.message_property]},
    )
    return SessionTool(
        spec=spec,
        action=action,  # type: ignore[arg-type]
        message_property=b.message_property,
        attachments_property=b.attachments_property,
    )


def session_tools(side: SideConfig) -> dict[str, SessionTool]:
    tools: dict[str, SessionTool] = {}
    if side.session_stop:
        tool = _session_tool(
            side.session_stop, "stop", "End the session successfully with a result."
        )
        tools[tool.name] = tool
    if side.session_fail:
        tool = _session_tool(side.session_fail, "fail", "End the session as failed, saying why.")
        tools[tool.name] = tool
    if side.session_status:
        tool = _session_tool(side.session_status, "status", "Publish a short progress status.")
        tools[tool.name] = tool
    if side.stop_tool:
        prop = side.stop_tool_response_property or "message"
        binding = SessionToolBinding(name=side.stop_tool, message_property=prop)
        tool = _session_tool(binding, "end_turn", "End your turn and hand over to the other side.")
        tools[tool.name] = tool
    return tools


def agent_tools(
    blueprint: BlueprintSpec, blueprints: Mapping[str, BlueprintSpec]
) -> dict[str, AgentTool]:
    tools: dict[str, AgentTool] = {}
    for name in blueprint.config.callable_agents:
        target = blueprints.get(name)
        if target is None or not target.expose_as_tool or target.name == blueprint.name:
            continue
        handoff = target.type == "ai_human"
        verb = "Hand the conversation over to" if handoff else "Run a session of"
        message = target.init_user_message_property or "message"
        attachments = target.init_attachments_property or "attachments"
        spec = ToolSpec(
            name=target.name,
            description=target.tool_description or f"{verb} {target.name}: {target.description}",
            parameters={
                "type": "object",
                "properties": {
                    message: {"type": "string", "description": "what the agent should do"},
                    attachments: _FILES,
                },
                "required": [] if handoff else [message],
            },
        )
        tools[target.name] = AgentTool(
            spec=spec,
            target=target.name,
            handoff=handoff,
            message_property=message,
            attachments_property=attachments,
        )
    return tools


_FILES = {
    "type": "array",
    "items": {"type": "string"},
    "description": "paths of your files to copy to the agent",
}


def _with_mapped_args(spec: ToolSpec, types: list[SubagentType], text: str) -> ToolSpec:
    """Offer the arguments that subagent entries read instead of the tool's own `text` and
    `attachments`; `text` is then required only by the check of the call, per type."""
    parameters = dict(spec.parameters)
    properties = dict(parameters.get("properties", {}))
    for t in types:
        if t.message_property and t.message_property not in properties:
            properties[t.message_property] = {
                "type": "string",
                "description": f"for subagentType {t.name}: its task, instead of `{text}`",
            }
        if t.attachments_property and t.attachments_property not in properties:
            properties[t.attachments_property] = {
                **_FILES,
                "description": f"for subagentType {t.name}: paths of your files to copy to it",
            }
    parameters["properties"] = properties
    if any(t.message_property for t in types):
        parameters["required"] = [r for r in parameters.get("required", []) if r != text]
    return ToolSpec(name=spec.name, description=spec.description, parameters=parameters)


def _with_enum(spec: ToolSpec, prop: str, values: list[str]) -> ToolSpec:
    parameters = dict(spec.parameters)
    properties = dict(parameters.get("properties", {}))
    properties[prop] = {**properties.get(prop, {}), "enum": values}
    parameters["properties"] = properties
    return ToolSpec(name=spec.name, description=spec.description, parameters=parameters)


def tools_now(
    system: AgentSystem,
    blueprint: BlueprintSpec,
    state: ThreadState,
    blueprints: Mapping[str, BlueprintSpec],
    mcp_tools: Mapping[str, Tool] | None = None,
) -> dict[str, AnyTool]:
    # MCP tools first: a tool of the system or its middleware keeps its name.
    tools: dict[str, AnyTool] = {
        **(mcp_tools or {}),
        **registered_tools(system, blueprint, state),
        **system.tools_for(blueprint),
    }
    types = subagent_types(blueprint.config, agent_env(blueprint))
    if not types:
        tools.pop(TASK_TOOL, None)
    else:
        task = tools.get(TASK_TOOL)
        if isinstance(task, SubagentTool):
            # Name the allowed types in the schema: models choose from an enum reliably.
            one_shot = sorted(n for n, t in types.items() if not t.resumable)
            spec = _with_enum(task.spec, "subagentType", one_shot)
            mapped = [types[n] for n in one_shot]
            tools[TASK_TOOL] = SubagentTool(spec=_with_mapped_args(spec, mapped, "description"))
    resumable = [t for _, t in sorted(types.items()) if t.resumable]
    if not resumable:
        for name in RESUMABLE_TOOLS:
            tools.pop(name, None)
    elif isinstance(create := tools.get(CREATE_TOOL), SubagentTool):
        tools[CREATE_TOOL] = SubagentTool(spec=_with_mapped_args(create.spec, resumable, "message"))
    tools.update(agent_tools(blueprint, blueprints))
    # An explicit child escalates by itself (services/agents/builtin/parent.py).
    tools.update(escalation_tools(state.parent))
    side = side_config(blueprint, state.side)
    if side is not None:
        tools.update(session_tools(side))
    return tools


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """The arguments of a call the runtime answers itself, read leniently: arguments that
    are no JSON object read as none (each tool then says what it misses)."""
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
