"""Tools a client runs itself (AG-UI's frontend tools, the `tools` a LangGraph client puts
in its input): offered to the model on an invoke (`client_tools`), never run here. A run
left with only their calls completes for the client to answer; the client's next input
answers them with tool messages."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from litestar.exceptions import ValidationException

from agency.contracts.events import ChatMessage, ClientTool, ToolCall

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A call of a client's tool its next input did not answer.
NOT_ANSWERED = "The client did not answer this call."


def offered(tools: Iterable[tuple[str, str, Any]]) -> tuple[ClientTool, ...]:
    """The client's tools (name, description, JSON Schema of the parameters), for the model
    to call and the client to answer; 400 if one cannot be offered to a model."""
    out: list[ClientTool] = []
    for name, description, parameters in tools:
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise ValidationException(
                f"tool name {str(name)[:80]!r} must be 1 to 64 letters, digits, '_' or '-'"
            )
        if parameters is not None and not isinstance(parameters, dict):
            raise ValidationException(f"tool {name!r}: parameters must be a JSON Schema object")
        out.append(ClientTool(name=name, description=str(description or ""),
                              parameters=parameters or {}))  # fmt: skip
    if len({t.name for t in out}) != len(out):
        raise ValidationException("tools must have distinct names")
    return tuple(out)


def answers(
    open_calls: tuple[ToolCall, ...], messages: tuple[ChatMessage, ...]
) -> tuple[ChatMessage, ...]:
    """The new messages with the thread's open calls (a client tool's, left by the last
    run) answered first: by the client's tool messages, else as not answered. A tool
    message for a call that is not open is dropped: the thread has its answer."""
    given = {m.tool_call_id: m for m in messages if m.role == "tool"}
    first = tuple(
        given.get(c.id) or ChatMessage(role="tool", content=NOT_ANSWERED, tool_call_id=c.id)
        for c in open_calls
    )
    return (*first, *(m for m in messages if m.role != "tool"))
