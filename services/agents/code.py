"""Code agents: an agent whose logic is a Python class instead of a prompt and a loop.

    class Greeter(CodeAgent):
        class Settings(msgspec.Struct):
            model: str = ""
            greeting: str = "Hello"

        async def on_message(self, message, ctx):
            ctx.reply.write(ctx.settings.greeting + ", ")
            async for delta in ctx.ai.stream(message.content):
                ctx.reply.write(delta)

    system = AgentSystem().defaults().code_agent("greeter", Greeter, settings={"greeting": "Hi"})

The runtime owns everything around `on_message`: the run's events, the conversation, the
model (each `ctx.ai` call is a recorded model call), the tools (`ctx.tools.call`), the
agent's state (events, so a replay rebuilds it), the reply (streamed as events) and
cancellation (`ctx.aborted`; the handler's task is cancelled). See `docs/internals/agents.md`,
"Code agents".
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec

from agency.contracts.events import ChatMessage
from agency.services.agents.code_context import AgentContext


class SettingsError(ValueError):
    """Settings that do not fit the agent's declared `Settings` schema."""

    def __init__(self, agent: str, field: str | None, problem: str) -> None:
        self.agent = agent
        self.field = field
        where = f"settings field {field!r}" if field else "settings"
        super().__init__(f"code agent {agent!r}: {where}: {problem}")


class ToolCallError(Exception):
    """A tool called with `ctx.tools.call` failed; the message is the tool's error."""


class CodeAgent(abc.ABC):
    """Subclass and implement `on_message`. Class attributes: `Settings` (a msgspec
    Struct, the declared settings schema), `tags` (pick tools and middleware's tools, as a
    blueprint's do), `model` (the default model of `ctx.ai`; the system's when empty) and
    `description`."""

    Settings: ClassVar[type[msgspec.Struct] | None] = None
    tags: ClassVar[tuple[str, ...]] = ()
    model: ClassVar[str] = ""
    description: ClassVar[str] = ""

    @abc.abstractmethod
    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str | None:
        """Handle one user message. What it writes with `ctx.reply.write` (and a string it
        returns) is the reply; an exception ends the run with `run.error`."""


_PATH = re.compile(r"at `\$\.([^`\[]+)")
_MISSING = re.compile(r"(?:missing required|unknown) field `([^`]+)`")


def validate_settings(agent: str, cls: type[CodeAgent], raw: Mapping[str, Any]) -> Any:
    """`raw` converted to the agent's `Settings`; a `SettingsError` naming the field when it
    does not fit. An agent without a schema takes any mapping as it is."""
    schema = cls.Settings
    if schema is None:
        return dict(raw)
    try:
        return msgspec.convert(dict(raw), schema, strict=True)
    except msgspec.ValidationError as e:
        text = str(e)
        found = _PATH.search(text) or _MISSING.search(text)
        problem = text.split(" - at ")[0]
        raise SettingsError(agent, found.group(1) if found else None, problem) from None
