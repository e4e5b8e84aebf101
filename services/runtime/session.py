"""Dual-AI sessions: two AI sides take turns on one thread until a stop rule ends it.

Stop rules, in the seed's order: the session tools (`session_stop` ends it with a result,
`session_fail` with a failure), the side's `stop_tool` (ends the side's turn), a text
answer with `stop_on_response` (ends the turn), then the safety limits (`max_steps` per
turn, `max_session_turns` per session). Each side sees itself as the assistant and the
other side as the user.
"""

from __future__ import annotations

from typing import Any, Literal

from agency.contracts.events import (
    AgentCompleted,
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    MessageAppended,
    RunCompleted,
    RunError,
    SessionStatusSet,
    SessionTurn,
    ToolCall,
    ToolError,
    ToolOutput,
)
from agency.domain.thread_state import RunView, ThreadState
from agency.services.agents.tools import SessionTool
from agency.services.runtime.toolset import call_arguments, side_config

Side = Literal["A", "B"]


def other(side: Side) -> Side:
    return "B" if side == "A" else "A"


def _tool_message(call: ToolCall, content: str) -> ChatMessage:
    return ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name)


def side_messages(state: ThreadState, side: Side) -> list[ChatMessage]:
    """The history as `side` sees it: its own turns as the assistant (with its tool calls
    and their results), the other side's words as the user, the task as the user."""
    mine: set[str] = set()
    view: list[ChatMessage] = []
    for m in state.messages:
        if m.role == "assistant" and m.name == side:
            mine.update(c.id for c in m.tool_calls)
            view.append(m)
        elif m.role == "assistant":
            if m.content:
                view.append(ChatMessage(role="user", content=m.content))
        elif m.role == "tool":
            if m.tool_call_id in mine:
                view.append(m)
        else:
            view.append(m)
    return view


def end_turn(state: ThreadState, run: RunView, blueprint: BlueprintSpec) -> tuple[AnyEvent, ...]:
    side: Side = state.side or "A"
    limit = blueprint.max_session_turns
    if limit is not None and state.session_turn >= limit:
        return end_by_limit(state, run, blueprint)
    return (SessionTurn(run_id=run.run_id, side=other(side), turn=state.session_turn + 1),)


def end_by_limit(
    state: ThreadState, run: RunView, blueprint: BlueprintSpec
) -> tuple[AnyEvent, ...]:
    """The turn cap ends the session: a natural end when no side can stop it by a tool,
    else a failure (a side that could have stopped it did not)."""
    stoppable = any(s is not None and s.session_stop for s in (blueprint.side_a, blueprint.side_b))
    if not stoppable:
        last = next(
            (m.content for m in reversed(state.messages) if m.role == "assistant" and m.content), ""
        )
        return (
            AgentCompleted(run_id=run.run_id, result=last),
            RunCompleted(run_id=run.run_id, result=last),
        )
    return (
        RunError(
            run_id=run.run_id,
            error=(
                f"the session reached its cap of {blueprint.max_session_turns} turns "
                "without stopping"
            ),
            kind="max_session_turns",
        ),
    )


def turn_over(state: ThreadState, blueprint: BlueprintSpec) -> bool:
    """Whether the side holding the floor is done with this turn (no call is open)."""
    side = side_config(blueprint, state.side)
    if side is None or state.side_steps == 0:
        return False
    if side.max_steps is not None and state.side_steps >= side.max_steps:
        return True
    last = state.messages[-1] if state.messages else None
    return bool(
        side.stop_on_response
        and last is not None
        and last.role == "assistant"
        and last.name == state.side
        and not last.tool_calls
    )


def session_call(
    state: ThreadState, run: RunView, call: ToolCall, tool: SessionTool, blueprint: BlueprintSpec
) -> tuple[AnyEvent, ...]:
    args = call_arguments(call)
    message = args.get(tool.message_property)
    if not isinstance(message, str):
        return _refused(run, call, f"needs a string `{tool.message_property}`")
    returned = _returned(state, args, tool) if tool.action in ("stop", "fail") else ()
    if isinstance(returned, str):
        return _refused(run, call, returned)
    output = {
        "stop": "The session is over.",
        "fail": "The session ended as failed.",
        "status": "Status published.",
        "end_turn": "Your turn is over.",
    }[tool.action]
    answered = (
        ToolOutput(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, output=output),
        MessageAppended(run_id=run.run_id, message=_tool_message(call, output)),
    )
    if tool.action == "status":
        return (
            *answered,
            SessionStatusSet(run_id=run.run_id, side=state.side or "A", status=message),
        )
    if tool.action == "end_turn":
        return (*answered, *end_turn(state, run, blueprint))
    # The session ends: answer the step's other calls so the history stays valid.
    others = tuple(
        MessageAppended(run_id=run.run_id, message=_tool_message(c, "Not run: the session ended."))
        for c in state.open_tool_calls()
        if c.id != call.id
    )
    if tool.action == "stop":
        return (
            *answered,
            *others,
            AgentCompleted(run_id=run.run_id, result=message),
            RunCompleted(run_id=run.run_id, result=message, attachments=returned),
        )
    return (
        *answered,
        *others,
        RunError(run_id=run.run_id, error=message, kind="session_fail", attachments=returned),
    )


def _refused(run: RunView, call: ToolCall, problem: str) -> tuple[AnyEvent, ...]:
    error = f"{call.name} {problem}"
    return (ToolError(run_id=run.run_id, tool_call_id=call.id, tool_name=call.name, error=error),)


def _returned(state: ThreadState, args: dict[str, Any], tool: SessionTool) -> tuple[str, ...] | str:
    """The files a session's end returns to its parent: those named in the binding's
    `attachments_property` (a list of paths, or one), none when it names no property.
    A problem is answered as a text for the model."""
    prop = tool.attachments_property
    if prop is None:
        return ()
    value = args.get(prop, [])
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        return f"needs `{prop}` as a list of file paths"
    if missing := [p for p in paths if state.file(p) is None]:
        return f"names files that do not exist in `{prop}`: {', '.join(missing)}"
    return tuple(dict.fromkeys(paths))
