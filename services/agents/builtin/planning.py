"""Planning: the `write_todos` tool and its prompt; todos live in `todos.written` events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from agency.contracts.events import Todo, TodosWritten
from agency.services.agents.middleware import PromptedStateTools
from agency.services.agents.tools import StateTool, StateToolOutcome, ToolSpec, object_schema

if TYPE_CHECKING:
    from agency.services.agents.view import ThreadView

WRITE_TODOS_PROMPT = """You have a `write_todos` tool to plan and track multi-step work.
Write the plan before starting, mark an item in_progress while you work on it and
completed when done. Each call replaces the whole list."""

WRITE_TODOS = ToolSpec(
    name="write_todos",
    description="Replace the todo list. Each todo has content and a status: "
    "pending, in_progress or completed.",
    parameters=object_schema(
        ["todos"],
        todos={
            "type": "array",
            "items": object_schema(
                ["content", "status"],
                content={"type": "string"},
                status={"type": "string", "enum": ["pending", "in_progress", "completed"]},
            ),
        },
    ),
)


def write_todos(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    try:
        todos = msgspec.convert(args.get("todos"), tuple[Todo, ...])
    except msgspec.ValidationError as e:
        return StateToolOutcome(output=f"invalid todos: {e}", error=True)
    summary = "\n".join(f"- [{t.status}] {t.content}" for t in todos) or "(empty)"
    return StateToolOutcome(
        output=f"Todo list updated:\n{summary}",
        events=(TodosWritten(run_id=run_id, todos=todos),),
    )


class PlanningMiddleware(PromptedStateTools):
    name = "planning"
    tags = ("planning",)
    prompt = WRITE_TODOS_PROMPT
    prompted_tools = (StateTool(spec=WRITE_TODOS, fn=write_todos),)
