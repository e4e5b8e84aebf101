"""Our messages and pending approvals as LangChain writes them: a `ChatMessage` as a message
dict (`type`: human, ai, tool, system), with its tool calls, valid and invalid, and the
pending tool calls as an interrupt of LangChain's human-in-the-loop middleware."""

from __future__ import annotations

import json
from typing import Any

from agency.contracts.events import ChatMessage, ToolCall
from agency.services.api.langgraph.content import content_dict


def _args(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tool_call_dict(call: ToolCall) -> dict[str, Any]:
    return {
        "name": call.name,
        "args": _args(call.arguments) or {},
        "id": call.id,
        "type": "tool_call",
    }


def message_dict(message: ChatMessage, message_id: str) -> dict[str, Any]:
    """A ChatMessage as LangChain serialises a message (`type`: human, ai, tool, system)."""
    out: dict[str, Any] = {
        "content": [content_dict(p) for p in message.parts] if message.parts else message.content,
        "additional_kwargs": {},
        "response_metadata": {},
        "id": message_id,
        "name": message.name,
    }
    match message.role:
        case "user":
            out["type"] = "human"
        case "system":
            out["type"] = "system"
        case "tool":
            out.update(type="tool", tool_call_id=message.tool_call_id or "", status="success")
        case "assistant":
            valid = [c for c in message.tool_calls if _args(c.arguments) is not None]
            invalid = [c for c in message.tool_calls if _args(c.arguments) is None]
            out.update(
                type="ai",
                tool_calls=[tool_call_dict(c) for c in valid],
                invalid_tool_calls=[
                    {
                        "name": c.name,
                        "args": c.arguments,
                        "id": c.id,
                        "error": "invalid JSON",
                        "type": "invalid_tool_call",
                    }
                    for c in invalid
                ],
                usage_metadata=None,
            )
    return out


def ai_message_id(run_id: str, step: int) -> str:
    """The id of the model's message of one step: its streamed chunks carry it too."""
    return f"{run_id}-{step}"


def interrupt_value(calls: tuple[ToolCall, ...]) -> dict[str, Any]:
    """Pending approvals in the shape of LangChain's human-in-the-loop middleware."""
    return {
        "action_requests": [
            {
                "name": c.name,
                "args": _args(c.arguments) or {},
                "id": c.id,
                "description": f"Tool execution pending approval: {c.name}",
            }
            for c in calls
        ],
        "review_configs": [
            {"action_name": c.name, "allowed_decisions": ["approve", "edit", "reject"]}
            for c in calls
        ],
    }
