"""Middleware with a part of `/state`, for the API's tests."""

from __future__ import annotations

from typing import Any

from contracts.events import BlueprintSpec
from services.agents.middleware import Middleware
from services.runtime.state import ThreadState

COUNTED_AGENT = "counted"


class MessageCounter(Middleware):
    """Counts the thread's user messages: a fold of the log, shown as `messageCounter`."""

    name = "message_counter"
    tags = ("counted",)

    def state(self, state: ThreadState) -> Any:
        users = [m.content for m in state.messages if m.role == "user"]
        return {"user_messages": len(users), "last": users[-1] if users else None}


class BrokenState(Middleware):
    name = "broken_state"
    tags = ("counted",)

    def state(self, state: ThreadState) -> Any:
        raise RuntimeError("no state today")


COUNTED = BlueprintSpec(name=COUNTED_AGENT, prompt="You count.", tags=("counted",))
