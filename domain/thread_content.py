"""A thread's content as its state holds it: files, todos, the tools middleware registered,
the agent's own state, and the tool calls asked for and answered; what each of those events
changes there. Pure, like the rest of the fold (`thread_state.py`)."""

from __future__ import annotations

import json
from typing import Any, Protocol, get_args

from agency.contracts.events import (
    AgentStateSet,
    ChatMessage,
    FileWritten,
    StateRestored,
    TodosWritten,
    ToolError,
    ToolOutput,
    ToolRegistered,
    ToolRequested,
)
from agency.domain.thread_parts import ToolOutcome

ContentEvent = (
    FileWritten
    | TodosWritten
    | StateRestored
    | ToolRegistered
    | AgentStateSet
    | ToolRequested
    | ToolOutput
    | ToolError
)
# The events `content_changes` folds.
CONTENT_EVENTS = get_args(ContentEvent)


class ContentState(Protocol):
    """The part of a thread's state (`ThreadState`) that its content events change."""

    @property
    def messages(self) -> tuple[ChatMessage, ...]: ...

    @property
    def files(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def tool_paths(self) -> frozenset[tuple[str, str]]: ...

    @property
    def requested(self) -> frozenset[str]: ...

    @property
    def outcomes(self) -> tuple[tuple[str, ToolOutcome], ...]: ...

    @property
    def registered_tools(self) -> dict[str, ToolRegistered]: ...


def content_changes(state: ContentState, payload: ContentEvent) -> dict[str, Any]:
    """The fields of `state` that a content event changes."""
    match payload:
        case FileWritten(path=path, content=content):
            kept = (*((p, c) for p, c in state.files if p != path), (path, content))
            return {"files": kept}
        case TodosWritten(todos=todos):
            return {"todos": todos}
        case StateRestored(messages=messages, files=files, todos=todos):
            # Set back to a past checkpoint's state; the log keeps what followed it.
            return {"messages": messages, "files": tuple(files.items()), "todos": todos}
        case ToolRegistered(name=name):
            return {"registered_tools": {**state.registered_tools, name: payload}}
        case AgentStateSet(value=value):
            return {"agent_state": value}
        case ToolRequested(call=call):
            return {"requested": state.requested | {call.id}}
        case ToolOutput(tool_call_id=call_id, tool_name=name, output=output):
            changes: dict[str, Any] = {
                "outcomes": (*state.outcomes, (call_id, ToolOutcome(output, error=False)))
            }
            named = _path_argument(state, call_id)
            if named is not None:
                changes["tool_paths"] = state.tool_paths | {(name, named)}
            return changes
        case ToolError(tool_call_id=call_id, error=error):
            return {"outcomes": (*state.outcomes, (call_id, ToolOutcome(error, error=True)))}


def _path_argument(state: ContentState, call_id: str) -> str | None:
    for message in reversed(state.messages):
        for call in message.tool_calls:
            if call.id == call_id:
                try:
                    args = json.loads(call.arguments or "{}")
                except ValueError:
                    return None
                path = args.get("path") if isinstance(args, dict) else None
                return path if isinstance(path, str) else None
    return None
