"""The chat request as the fake LLM reads it (unknown fields ignored), and the reason OpenAI
would refuse one (`validate`)."""

from __future__ import annotations

from typing import Any

import msgspec


class WireFunctionCall(msgspec.Struct, frozen=True):
    name: str = ""
    arguments: str = ""


class WireToolCall(msgspec.Struct, frozen=True):
    id: str = ""
    type: str = "function"
    function: WireFunctionCall = WireFunctionCall()


class WireContentPart(msgspec.Struct, frozen=True):
    type: str = "text"
    text: str = ""


class WireMessage(msgspec.Struct, frozen=True):
    role: str
    content: str | list[WireContentPart] | None = None
    tool_calls: list[WireToolCall] | None = None
    tool_call_id: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content if part.type == "text")
        return self.content or ""


class WireFunctionDef(msgspec.Struct, frozen=True):
    name: str
    parameters: dict[str, Any] | None = None

    def enum_of(self, prop: str) -> list[str]:
        """The allowed values the schema lists for one argument."""
        spec = ((self.parameters or {}).get("properties") or {}).get(prop) or {}
        values = spec.get("enum") if isinstance(spec, dict) else None
        return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


class WireTool(msgspec.Struct, frozen=True):
    type: str = "function"
    function: WireFunctionDef | None = None


class WireStreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool = False


class ChatRequest(msgspec.Struct, frozen=True):
    model: str
    messages: list[WireMessage]
    tools: list[WireTool] | None = None
    stream: bool = False
    stream_options: WireStreamOptions | None = None

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(t.function.name for t in self.tools or () if t.function is not None)

    @property
    def step(self) -> int:
        """Which model step of the conversation this is: the assistant messages so far."""
        return sum(1 for m in self.messages if m.role == "assistant")

    @property
    def turn_step(self) -> int:
        """Which model step of the turn this is: the assistant messages since the latest
        user message (all of them in a conversation without one)."""
        since = 0
        for m in reversed(self.messages):
            if m.role == "user":
                return since
            since += m.role == "assistant"
        return since

    def tool(self, name: str) -> WireFunctionDef | None:
        for t in self.tools or ():
            if t.function is not None and t.function.name == name:
                return t.function
        return None

    def called(self) -> set[str]:
        return {c.function.name for m in self.messages for c in m.tool_calls or ()}


def validate(request: ChatRequest) -> str | None:
    """The reason OpenAI would refuse this conversation, or None if it would accept it."""
    if not request.messages:
        return "messages must not be empty"
    open_calls: set[str] = set()
    for i, message in enumerate(request.messages):
        if message.role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}].role {message.role!r} is not a valid role"
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                return (
                    f"messages[{i}] is a tool message answering {message.tool_call_id!r}, "
                    "which no preceding assistant message called"
                )
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            return (
                "an assistant message with tool_calls must be followed by tool messages "
                f"answering each call; unanswered: {sorted(open_calls)}"
            )
        if message.role == "assistant":
            open_calls = {c.id for c in message.tool_calls or ()}
    return None
