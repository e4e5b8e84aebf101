"""What a code agent (`services/agents/code.py`) streams while it handles a message, and
the state it keeps. A code agent's model calls and tool calls use the model and tool
events; its final reply is an assistant `message.appended` like any agent's."""

from __future__ import annotations

from typing import Any

from agency.contracts.events.base import InRun


class ReplyDelta(InRun, frozen=True, kw_only=True, tag="reply.delta"):
    """Text the agent wrote to its reply (`ctx.reply.write`), coalesced per ~50 ms."""

    text: str


class ReplyThinking(InRun, frozen=True, kw_only=True, tag="reply.thinking"):
    text: str


class ReplyAction(InRun, frozen=True, kw_only=True, tag="reply.action"):
    """An action the agent shows (`ctx.reply.action(name, args)`); `arguments` is JSON."""

    name: str
    arguments: str = "{}"


class AgentStateSet(InRun, frozen=True, kw_only=True, tag="agent.state_set"):
    """The agent's state is now `value` (any JSON value); the fold keeps the last one."""

    value: Any = None


ReplyEvent = ReplyDelta | ReplyThinking | ReplyAction | AgentStateSet
