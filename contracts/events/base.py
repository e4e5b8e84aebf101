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


PartType = Literal["text", "image_url", "image"]


class ContentPart(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One part of a message's content that is more than text: text, or an image, in the
    form the client wrote it, so that it reads back as sent. `image_url` is OpenAI's part
    (`url` an https or `data:` URL, `detail`); `image` is LangChain's block, by `url`, or
    inline as base64 (`base64`, or `data` with `source_type`) with its `mime_type`."""

    type: PartType
    text: str = ""
    url: str = ""
    detail: str = ""
    base64: str = ""
    data: str = ""
    source_type: str = ""
    mime_type: str = ""

    def image_url(self) -> str:
        """The image as a URL a model reads (an inline image as a `data:` URL)."""
        inline = self.base64 or self.data
        if self.type == "image" and inline and self.source_type != "url":
            return f"data:{self.mime_type or 'image/png'};base64,{inline}"
        return self.url


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One message of a conversation (OpenAI chat shape): an assistant's may carry tool
    calls, a tool's names the call it answers. A message with images has `parts` (its
    whole content, in order); its `content` is then its text alone."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    parts: tuple[ContentPart, ...] = ()


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
