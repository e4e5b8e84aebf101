"""What a `RunAgentInput` asks of a thread: a run with new messages, the answers to the
interrupts its paused run awaits, or nothing it may ask (a refusal the run ends with).

An AG-UI client sends the whole conversation each time; the thread holds it already, so
only what follows the client's last assistant message is new, less what the thread took
already of it (a run cut before its answer began). Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from litestar.exceptions import ValidationException

from agency.contracts.events import ChatMessage, ClientTool, ToolCall
from agency.domain.thread_state import ThreadState
from agency.services.api.agui.translate import interrupt_id
from agency.services.api.agui.wire import MessageIn, ResumeEntry, RunAgentInput, ToolIn
from agency.services.api.approval import Approval
from agency.services.api.client_tools import answers, offered


@dataclass(frozen=True, slots=True)
class NewInput:
    messages: tuple[ChatMessage, ...]
    tools: tuple[ClientTool, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume(Approval):
    """A decision on every call the paused run `run_id` holds."""

    run_id: str


@dataclass(frozen=True, slots=True)
class Refusal:
    """An input the protocol answers with `RUN_ERROR` (AG-UI's interrupt rules)."""

    message: str
    code: str


def check(data: RunAgentInput) -> None:
    """400 for what no thread could take: messages or tools Agency cannot read. Checked
    before the thread is created."""
    new_messages(data.messages)
    client_tools(data.tools)


def plan(state: ThreadState, data: RunAgentInput) -> NewInput | Resume | Refusal:
    run = state.active_run
    held = run.hitl_pending if run is not None and run.status == "paused" else ()
    if not data.resume:
        if run is not None and held:
            ids = ", ".join(interrupt_id(run.run_id, c.id) for c in held)
            return Refusal(
                f"thread {state.thread_id} has open interrupts ({ids}): answer every one of "
                "them with `resume` before sending new input",
                "interrupts_pending",
            )
        open_calls = state.open_tool_calls() if run is None else ()
        fresh = unanswered_dropped(state.messages, data.messages, new_messages(data.messages))
        return NewInput(answers(open_calls, fresh), client_tools(data.tools))
    if run is None or not held:
        return Refusal(
            f"thread {state.thread_id} has no open interrupt: send the run without `resume`",
            "no_open_interrupt",
        )
    return _decide(run.run_id, held, data.resume)


def _decide(run_id: str, held: tuple[ToolCall, ...], resume: list[ResumeEntry]) -> Resume | Refusal:
    expected = {interrupt_id(run_id, c.id): c for c in held}
    given = {entry.interrupt_id: entry for entry in resume}
    unknown = sorted(set(given) - set(expected))
    if unknown:
        return Refusal(
            f"resume answers interrupts that are not open: {', '.join(unknown)[:300]}; "
            f"the open ones are {', '.join(expected)}",
            "unknown_interrupt",
        )
    missing = [i for i in expected if i not in given]
    if missing:
        return Refusal(
            f"resume must answer every open interrupt; missing: {', '.join(missing)}",
            "interrupts_unanswered",
        )
    decisions = [_decision(given[i], call) for i, call in expected.items()]
    if any(isinstance(d, Refusal) for d in decisions):
        return next(d for d in decisions if isinstance(d, Refusal))
    verdicts = [d for d in decisions if not isinstance(d, Refusal)]
    if all(approved for approved, _, _ in verdicts):
        edits = tuple(edit for _, edit, _ in verdicts if edit is not None)
        return Resume(True, edits or None, run_id=run_id)
    if not any(approved for approved, _, _ in verdicts):
        reason = "; ".join(r for _, _, r in verdicts if r)
        return Resume(False, None, reason, run_id=run_id)
    return Refusal(
        "resume approves some held tool calls and rejects others: Agency approves or rejects "
        "the calls of one step together",
        "mixed_decisions",
    )


def _decision(entry: ResumeEntry, call: ToolCall) -> tuple[bool, ToolCall | None, str] | Refusal:
    """(approved, the call as edited, the reason given) for one interrupt's answer."""
    if entry.status == "cancelled":
        return (False, None, "")
    payload: Any = entry.payload
    if isinstance(payload, bool):
        return (payload, None, "")
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        return Refusal(
            f"the answer to interrupt {entry.interrupt_id} must be a payload "
            '{"approved": true|false, "editedArgs"?: {...}, "reason"?: "..."}',
            "invalid_payload",
        )
    reason = payload.get("reason")
    reason = reason if isinstance(reason, str) else ""
    edited = payload.get("editedArgs")
    if edited is None or not payload["approved"]:
        return (payload["approved"], None, reason)
    if not isinstance(edited, dict):
        return Refusal(
            f"editedArgs of interrupt {entry.interrupt_id} must be an object: the call's "
            "arguments, replaced whole",
            "invalid_payload",
        )
    return (True, ToolCall(id=call.id, name=call.name, arguments=json.dumps(edited)), reason)


# What the model's provider accepts as a function's name.
def client_tools(tools: list[ToolIn]) -> tuple[ClientTool, ...]:
    """The input's frontend tools, for the model to call and the client to answer."""
    return offered((t.name, t.description, t.parameters) for t in tools)


def new_messages(messages: list[MessageIn]) -> tuple[ChatMessage, ...]:
    """The client's messages after its last assistant message, as the thread's messages
    (a developer's as a system message; activity and reasoning messages are the client's)."""
    last = max((n for n, m in enumerate(messages) if m.role == "assistant"), default=-1)
    out: list[ChatMessage] = []
    for message in messages[last + 1 :]:
        if message.role == "user":
            out.append(ChatMessage(role="user", content=_text(message)))
        elif message.role in ("system", "developer"):
            out.append(ChatMessage(role="system", content=_text(message)))
        elif message.role == "tool":
            out.append(
                ChatMessage(
                    role="tool",
                    content=_text(message) or message.error or "",
                    tool_call_id=message.tool_call_id,
                )
            )
    return tuple(out)


def unanswered_dropped(
    held: tuple[ChatMessage, ...], given: list[MessageIn], new: tuple[ChatMessage, ...]
) -> tuple[ChatMessage, ...]:
    """`new` without the messages the thread took already but the client never saw
    answered (a run whose stream was cut before its answer began): the client sends them
    again, before its next one. They are the thread's messages after its answer to the
    client's last assistant message (by count), matched in order; one message at least
    stays new, so a client that sends only its latest message is taken at its word."""
    answered = sum(1 for m in given if m.role == "assistant")
    seen = 0
    taken: list[ChatMessage] = []
    for message in held:
        if message.role == "assistant":
            seen += 1
            if seen > answered:
                break
        elif seen == answered:
            taken.append(message)
    n = 0
    while n < min(len(taken), len(new) - 1) and _same_input(taken[n], new[n]):
        n += 1
    return new[n:]


def _same_input(a: ChatMessage, b: ChatMessage) -> bool:
    return (a.role, a.content, a.tool_call_id) == (b.role, b.content, b.tool_call_id)


def _text(message: MessageIn) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValidationException(
                    f"message {message.id[:64]!r}: content part of type {str(kind)[:40]!r} is "
                    "not supported; send text parts"
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise ValidationException(
        f"message {message.id[:64]!r}: content must be text or a list of text parts"
    )
