"""The tools middleware registered for a thread, as its log recorded them: offered by the
runtime and listed by the API's thread state."""

from __future__ import annotations

from dataclasses import replace

from agency.contracts.events import BlueprintSpec
from agency.domain.thread_state import ThreadState
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import (
    AgentTool,
    SessionTool,
    StateTool,
    SubagentTool,
    Tool,
    ToolSpec,
)

AnyTool = Tool | StateTool | SubagentTool | AgentTool | SessionTool


def registered_tools(
    system: AgentSystem, blueprint: BlueprintSpec, state: ThreadState
) -> dict[str, AnyTool]:
    """The tools middleware registered for the thread (`tool.registered`), as recorded:
    the recorded spec, run by the middleware's registrable tool of that name. One whose
    middleware no longer offers it (or not for this blueprint) is not offered."""
    if not state.registered_tools:
        return {}
    registrable = system.registrable_for(blueprint)
    tools: dict[str, AnyTool] = {}
    for name, registered in state.registered_tools.items():
        found = registrable.get(name)
        if found is None:
            continue
        spec = ToolSpec(
            name=name, description=registered.description, parameters=registered.parameters
        )
        tools[name] = replace(found[1], spec=spec)
    return tools
