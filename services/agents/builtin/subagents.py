"""Subagents: the `task` tool delegates work to a child thread and reports its answer back.

Blueprint config: `{"subagents": {"subagents": ["researcher", {"name": "writer",
"blocking": false}]}}` lists the blueprints this agent may spawn (a name also resolves to
the agency's dynamic blueprint of that name). A blocking call pauses the parent's run
(reason `subagent`) until every child of the step has reported; a non-blocking one answers
at once with the child's reference, and the child's result arrives later as a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.agents.middleware import Middleware, MiddlewareContext
from services.agents.tools import SubagentTool, ToolSpec

TASK = ToolSpec(
    name="task",
    description="Delegate a self-contained task to a subagent. It works in its own thread "
    "and answers with a report. Calls in one step run in parallel.",
    parameters={
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "the task, with all context needed"},
            "subagentType": {"type": "string", "description": "which subagent to use"},
            "timeoutMs": {"type": "integer", "description": "give up after this many ms"},
        },
        "required": ["description", "subagentType"],
    },
)


@dataclass(frozen=True, slots=True)
class SubagentType:
    name: str
    blocking: bool = True


def subagent_types(config: Mapping[str, Any]) -> dict[str, SubagentType]:
    section = config.get("subagents")
    entries = section.get("subagents") if isinstance(section, Mapping) else None
    types: dict[str, SubagentType] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, str):
            types[entry] = SubagentType(entry)
        elif isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            types[entry["name"]] = SubagentType(entry["name"], bool(entry.get("blocking", True)))
    return types


class SubagentsMiddleware(Middleware):
    name = "subagents"
    tags = ("subagents",)

    def system_prompt(self, ctx: MiddlewareContext) -> str | None:
        types = subagent_types(ctx.config)
        if not types:
            return None
        listed = ", ".join(sorted(types))
        return (
            "You can delegate with the `task` tool to these subagents: "
            f"{listed}. Give each a complete description; it sees nothing else."
        )

    def subagent_tools(self) -> tuple[SubagentTool, ...]:
        return (SubagentTool(spec=TASK),)
