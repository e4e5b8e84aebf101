"""The base of every event payload and the value types events share."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """A fact. The tag (`type` on the wire) is the event type, e.g. `tool.started`.

    `schema_version` is the version this code writes; older stored versions are upcast on
    read (see `contracts.codec`). New fields get defaults; a field never changes type.
    """

    schema_version: ClassVar[int] = 1


class InRun(Event, frozen=True, kw_only=True):
    """An event of one run (of a thread, or of a workflow): `run_id` names the run."""

    run_id: str


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call the model proposed. `arguments` is the JSON text the model produced."""

    id: str
    name: str
    arguments: str = "{}"


Role = Literal["system", "user", "assistant", "tool"]


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of a conversation (OpenAI chat shape): an assistant's may carry tool
    calls, a tool's names the call it answers."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ClientTool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool the invoking client runs itself (an AG-UI frontend tool): offered to the
    model during the run whose request named it. The runtime never runs it: a run whose
    open calls are all the client's completes with them unanswered, and the client's next
    request answers each with a tool message."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0


TodoStatus = Literal["pending", "in_progress", "completed"]


class Todo(msgspec.Struct, frozen=True, kw_only=True):
    """One item of a thread's plan (`write_todos`)."""

    content: str
    status: TodoStatus = "pending"


class ParentRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where a child thread reports to: the parent thread and the call that spawned it.
    With `communication` `explicit`, nothing is reported by itself: the child escalates
    with `notify_parent` and `set_status`."""

    thread_id: str
    token: str
    tool_call_id: str | None = None
    communication: Literal["implicit", "explicit"] = "implicit"
