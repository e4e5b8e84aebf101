"""AG-UI's wire: the `RunAgentInput` a client posts and the events it is answered with.

Names are AG-UI's own (camelCase); only the fields Agency reads or writes are declared.
The input keeps what it does not declare unread (a newer client's fields are not refused);
events leave out what they do not carry. Event types are AG-UI 1.0's (`@ag-ui/core`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

PROTOCOL_VERSION = "1.0"

# --- the input ---------------------------------------------------------------------------

InputRole = Literal["developer", "system", "assistant", "user", "tool", "activity", "reasoning"]


class In(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The input's parts: camelCase, fields Agency does not read are let through unread."""


class FunctionCallIn(In, frozen=True, kw_only=True):
    name: str
    arguments: str = "{}"


class ToolCallIn(In, frozen=True, kw_only=True):
    id: str
    function: FunctionCallIn
    type: str = "function"


class MessageIn(In, frozen=True, kw_only=True):
    """One message of the client's conversation. `content` is text, or (a user's) a list of
    parts of which the text ones are read."""

    id: str
    role: InputRole
    content: Any = None
    tool_calls: list[ToolCallIn] = []
    tool_call_id: str | None = None
    name: str | None = None
    error: str | None = None


class ToolIn(In, frozen=True, kw_only=True):
    """A frontend tool: the client runs it and answers its calls in the next input."""

    name: str
    description: str = ""
    parameters: Any = None


class ResumeEntry(In, frozen=True, kw_only=True):
    interrupt_id: str
    status: Literal["resolved", "cancelled"]
    payload: Any = None


class RunAgentInput(In, frozen=True, kw_only=True):
    thread_id: str
    run_id: str
    messages: list[MessageIn] = []
    tools: list[ToolIn] = []
    context: list[Any] = []
    state: Any = None
    forwarded_props: Any = None
    parent_run_id: str | None = None
    protocol_version: str | None = None
    resume: list[ResumeEntry] | None = None


# --- the events --------------------------------------------------------------------------


class Out(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    pass


class FunctionCallOut(Out, frozen=True, kw_only=True):
    name: str
    arguments: str


class ToolCallOut(Out, frozen=True, kw_only=True):
    id: str
    type: Literal["function"]
    function: FunctionCallOut


class MessageOut(Out, frozen=True, kw_only=True):
    id: str
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCallOut, ...] = ()
    tool_call_id: str | None = None


class Interrupt(Out, frozen=True, kw_only=True):
    id: str
    reason: str
    message: str = ""
    tool_call_id: str | None = None
    response_schema: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class Outcome(Out, frozen=True, kw_only=True, tag_field="type"):
    pass


class Success(Outcome, frozen=True, kw_only=True, tag="success"):
    pending_tool_call_ids: tuple[str, ...] = ()


class Interrupted(Outcome, frozen=True, kw_only=True, tag="interrupt"):
    interrupts: tuple[Interrupt, ...]


class Cancelled(Outcome, frozen=True, kw_only=True, tag="cancelled"):
    pass


class Event(Out, frozen=True, kw_only=True, tag_field="type"):
    pass


class RunEvent(Event, frozen=True, kw_only=True):
    """An event of one run of one thread."""

    thread_id: str
    run_id: str


class MessageEvent(Event, frozen=True, kw_only=True):
    """An event of one message, text or reasoning."""

    message_id: str


class MessageDelta(MessageEvent, frozen=True, kw_only=True):
    """The next piece of a message's text."""

    delta: str


class ToolCallEvent(Event, frozen=True, kw_only=True):
    """An event of one tool call."""

    tool_call_id: str


class StepEvent(Event, frozen=True, kw_only=True):
    step_name: str


class RunStarted(RunEvent, frozen=True, kw_only=True, tag="RUN_STARTED"):
    protocol_version: str | None = None


class RunFinished(RunEvent, frozen=True, kw_only=True, tag="RUN_FINISHED"):
    outcome: Success | Interrupted | Cancelled
    result: str | None = None


class RunErrorEvent(Event, frozen=True, kw_only=True, tag="RUN_ERROR"):
    message: str
    code: str | None = None


class TextMessageStart(MessageEvent, frozen=True, kw_only=True, tag="TEXT_MESSAGE_START"):
    role: str = "assistant"


class TextMessageContent(MessageDelta, frozen=True, kw_only=True, tag="TEXT_MESSAGE_CONTENT"):
    pass


class TextMessageEnd(MessageEvent, frozen=True, kw_only=True, tag="TEXT_MESSAGE_END"):
    pass


class ToolCallStart(ToolCallEvent, frozen=True, kw_only=True, tag="TOOL_CALL_START"):
    tool_call_name: str
    parent_message_id: str | None = None


class ToolCallArgs(ToolCallEvent, frozen=True, kw_only=True, tag="TOOL_CALL_ARGS"):
    delta: str


class ToolCallEnd(ToolCallEvent, frozen=True, kw_only=True, tag="TOOL_CALL_END"):
    pass


class ToolCallResult(MessageEvent, frozen=True, kw_only=True, tag="TOOL_CALL_RESULT"):
    tool_call_id: str
    content: str
    role: str = "tool"


class StateSnapshot(Event, frozen=True, kw_only=True, tag="STATE_SNAPSHOT"):
    snapshot: dict[str, Any]


class MessagesSnapshot(Event, frozen=True, kw_only=True, tag="MESSAGES_SNAPSHOT"):
    messages: tuple[MessageOut, ...]


class StepStarted(StepEvent, frozen=True, kw_only=True, tag="STEP_STARTED"):
    pass


class StepFinished(StepEvent, frozen=True, kw_only=True, tag="STEP_FINISHED"):
    pass


class ReasoningStart(MessageEvent, frozen=True, kw_only=True, tag="REASONING_START"):
    pass


class ReasoningMessageStart(MessageEvent, frozen=True, kw_only=True, tag="REASONING_MESSAGE_START"):
    role: Literal["reasoning"]


class ReasoningMessageContent(
    MessageDelta, frozen=True, kw_only=True, tag="REASONING_MESSAGE_CONTENT"
):
    pass


class ReasoningMessageEnd(MessageEvent, frozen=True, kw_only=True, tag="REASONING_MESSAGE_END"):
    pass


class ReasoningEnd(MessageEvent, frozen=True, kw_only=True, tag="REASONING_END"):
    pass


_encoder = msgspec.json.Encoder()


def sse(event: Event) -> bytes:
    """One Server-Sent Events frame: compact JSON never holds a line break."""
    return b"data: %s\n\n" % _encoder.encode(event)
