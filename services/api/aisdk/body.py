"""The body `useChat` posts (`{id, messages, trigger, messageId}`) and what it asks for.

The chat's `id` is the thread; each message is a UI message (`{id, role, parts}`). Two
requests map: the last message is the user's (its text parts are the run's input), or it
is the assistant's with tool approval responses (`approval-responded` tool parts: the
decision on the calls the paused run awaits). Anything else is refused with a 400 saying
what would map. Pure msgspec: no web framework, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

from agency.contracts.events import ChatMessage, ToolCall
from agency.services.api.approval import Approval
from agency.services.api.text import refuse_nul

ChatId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Trigger = Literal["submit-message", "regenerate-message"]


class ApprovalIn(msgspec.Struct, frozen=True, kw_only=True):
    """A tool part's `approval`: the id the server's `tool-approval-request` gave, and,
    once the user answered, the answer."""

    id: str
    approved: bool | None = None
    reason: str | None = None


class PartIn(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One part of a UI message; only text and tool parts mean anything here, the others
    (files, reasoning, sources, data) are carried as the client keeps them and ignored."""

    type: str
    text: str | None = None
    tool_call_id: str | None = None
    state: str | None = None
    approval: ApprovalIn | None = None


class MessageIn(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    role: Literal["system", "user", "assistant"]
    parts: list[PartIn] = msgspec.field(default_factory=list)
    metadata: Any = None


class ChatBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What `DefaultChatTransport` posts; fields a client adds with its `body` option are
    ignored."""

    id: ChatId
    messages: Annotated[list[MessageIn], msgspec.Meta(min_length=1)]
    trigger: Trigger = "submit-message"
    message_id: str | None = None

    def __post_init__(self) -> None:
        refuse_nul(self)


@dataclass(frozen=True, slots=True)
class Ask:
    """A new user message: a run with it as input. `key`: the message's id, so the same
    message posted again is the same run."""

    message: ChatMessage
    key: str


@dataclass(frozen=True, slots=True)
class Decide:
    """The answers to the approvals of the assistant message `message_id`, by approval id."""

    message_id: str
    answers: dict[str, tuple[bool, str]]


class NotMapped(ValueError):
    """The body asks for something the chat cannot do; the message says what would."""


def request_of(body: ChatBody) -> Ask | Decide:
    """What the body asks for: a run of its last user message, or a decision on approvals."""
    if body.trigger == "regenerate-message":
        raise NotMapped(
            "trigger 'regenerate-message' does not map: a thread's history is kept as it "
            "happened; send a new user message instead"
        )
    last = body.messages[-1]
    if last.role == "user":
        text = "\n".join(p.text for p in last.parts if p.type == "text" and p.text)
        if not text.strip():
            raise NotMapped(f"the last message ({last.id[:64]!r}) has no text part to send")
        return Ask(ChatMessage(role="user", content=text), last.id)
    if last.role == "assistant":
        answers = {
            p.approval.id: (p.approval.approved, p.approval.reason or "")
            for p in last.parts
            if p.type.startswith(("tool-", "dynamic-tool"))
            and p.state == "approval-responded"
            and p.approval is not None
            and p.approval.approved is not None
        }
        if answers:
            return Decide(last.id, answers)
    raise NotMapped(
        "the last message must be the user's new message, or the assistant's with tool "
        f"approval responses; it is a {last.role} message without either"
    )


def approval_id(run_id: str, call_id: str) -> str:
    """The approval id of a pending call: bound to its run, so an answer given after the
    run moved on is refused rather than applied to another."""
    return f"{run_id}.{call_id}"


def decision(decide: Decide, run_id: str, pending: tuple[ToolCall, ...]) -> Approval:
    """One decision on every call `run_id` awaits, from the answers; `NotMapped` when an
    answer is missing, names another call, or approvals and rejections are mixed (Agency
    approves or rejects a step's calls together)."""
    wanted = {approval_id(run_id, c.id) for c in pending}
    unknown = sorted(set(decide.answers) - wanted)
    if unknown:
        raise NotMapped(
            f"approval {unknown[0][:120]!r} is not one the chat awaits: the run it was asked "
            "for has moved on"
        )
    missing = sorted(wanted - set(decide.answers))
    if missing:
        raise NotMapped(
            f"{len(missing)} of the {len(wanted)} pending tool calls have no approval "
            "response: answer every approval request of the step"
        )
    verdicts = {approved for approved, _ in decide.answers.values()}
    if len(verdicts) > 1:
        raise NotMapped(
            "approving some tool calls and rejecting others does not map: Agency approves "
            "or rejects a step's calls together"
        )
    reasons = [reason for _, reason in decide.answers.values() if reason]
    return Approval(verdicts.pop(), reason="; ".join(dict.fromkeys(reasons)))
