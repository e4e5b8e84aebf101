"""Ending a run early: its unanswered tool calls are answered so the history stays valid."""

from __future__ import annotations

from agency.contracts.events import AnyEvent, ChatMessage, MessageAppended, RunCanceled, ToolCall
from agency.domain.thread_state import ThreadState


def tool_message(call: ToolCall, content: str) -> ChatMessage:
    return ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name)


def canceled(state: ThreadState, run_id: str, reason: str) -> tuple[AnyEvent, ...]:
    """End a run; its unanswered tool calls get an answer so the history stays valid."""
    answers = tuple(
        MessageAppended(run_id=run_id, message=tool_message(call, f"Not run: {reason}."))
        for call in state.open_tool_calls()
    )
    return (*answers, RunCanceled(run_id=run_id, reason=reason))
