"""Middleware with a part of `/state`, for the API's tests."""

from __future__ import annotations

from typing import Any

from agency import (
    Middleware,
    StateTool,
    StateToolOutcome,
    ThreadView,
    Tool,
    ToolSpec,
)
from agency.contracts.events import BlueprintSpec


def _echo(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    return StateToolOutcome(output=str(args))


ECHO = StateTool(spec=ToolSpec(name="echo", description="Echo the arguments."), fn=_echo)

COUNTED_AGENT = "counted"


class MessageCounter(Middleware):
    """Counts the thread's user messages: a fold of the log, shown as `messageCounter`."""

    name = "message_counter"
    tags = ("counted",)

    def registrable_tools(self) -> tuple[Tool | StateTool, ...]:
        return (ECHO,)

    def state(self, state: ThreadView) -> Any:
        users = [m.content for m in state.messages if m.role == "user"]
        return {"user_messages": len(users), "last": users[-1] if users else None}


class BrokenState(Middleware):
    name = "broken_state"
    tags = ("counted",)

    def state(self, state: ThreadView) -> Any:
        raise RuntimeError("no state today")


COUNTED = BlueprintSpec(name=COUNTED_AGENT, prompt="You count.", tags=("counted",))
