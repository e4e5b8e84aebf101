"""What a LangGraph run request asks for, in our terms: messages and files to invoke with,
the invoke strategy, or the approval a `command: {resume}` stands for. Pure functions;
each refusal says what does not map."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from litestar.exceptions import ValidationException

from agency.contracts.envelope import utc_now
from agency.contracts.events import ChatMessage, ClientTool, ContentPart, ToolCall
from agency.contracts.events.thread import ConcurrencyStrategy
from agency.services.api.approval import Approval
from agency.services.api.client_tools import answers, offered
from agency.services.api.langgraph.content import (
    check_inline_size,
    has_images,
    inline_chars,
    parts_of,
    text_of,
)
from agency.services.api.langgraph.wire import MultitaskStrategy, RunCreate

# LangGraph's default strategy is `reject`; ours (`/invoke`) is `queue`.
STRATEGIES: dict[MultitaskStrategy, ConcurrencyStrategy] = {
    "enqueue": "queue",
    "reject": "reject",
    "interrupt": "interrupt",
}
MULTITASK_OF: dict[str, MultitaskStrategy] = {v: k for k, v in STRATEGIES.items()}
_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "system": "system",
}


# The nodes of every blueprint's graph (`routes_graph`): the agent loop.
NODES = ("model", "tools")


def _nodes(value: str | list[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


class NamesBreakpoints(Protocol):
    """A run's or a cron's `interrupt_before` / `interrupt_after`."""

    @property
    def interrupt_before(self) -> str | list[str] | None: ...
    @property
    def interrupt_after(self) -> str | list[str] | None: ...


def unknown_nodes(data: NamesBreakpoints) -> list[str]:
    """Node names of `interrupt_before` / `interrupt_after` the graph does not have."""
    named: list[str] = []
    for option in ("interrupt_before", "interrupt_after"):
        unknown = [n for n in _nodes(getattr(data, option)) if n != "*" and n not in NODES]
        if unknown:
            listed = ", ".join(repr(n[:40]) for n in unknown[:5])
            named.append(f"{option} {listed} (the graph's nodes are 'model' and 'tools')")
    return named


@dataclass(frozen=True, slots=True)
class Breakpoints:
    """A run's static breakpoints, as the runtime pauses (`runtime.invoke`): before the
    tool calls of each answer (`interrupt_before=["tools"]`, and `interrupt_after=["model"]`,
    which stops at the same point: after an answer with tool calls; after a final answer
    nothing is next and the run completes), before every model call
    (`interrupt_before=["model"]`, the first included), and before each model call that
    follows a tool step (`interrupt_after=["tools"]`). `"*"` names both nodes."""

    pause_before_tools: bool = False
    pause_before_model: bool = False
    pause_after_tools: bool = False


def breakpoints(data: NamesBreakpoints) -> Breakpoints:
    before, after = _nodes(data.interrupt_before), _nodes(data.interrupt_after)

    def named(nodes: list[str], node: str) -> bool:
        return node in nodes or "*" in nodes

    return Breakpoints(
        pause_before_tools=named(before, "tools") or named(after, "model"),
        pause_before_model=named(before, "model"),
        pause_after_tools=named(after, "tools"),
    )


def refuse_unmapped(data: RunCreate) -> None:
    """Options of a LangGraph run that Agency has no counterpart for: a clear 400."""
    named = unknown_nodes(data)
    if data.multitask_strategy == "rollback":
        named.append("multitask_strategy 'rollback' (the log is append-only: use 'interrupt')")
    refuse_options(named, "runs")


def refuse_thread_deletion(data: RunCreate) -> None:
    """`on_completion="delete"` is for a stateless run's own thread: a thread named by the
    client is deleted with `threads.delete`."""
    if data.on_completion == "delete":
        raise ValidationException(
            "on_completion='delete' deletes the thread a stateless run makes; delete a "
            "thread of your own with `threads.delete`"
        )


# The longest a run may be asked for ahead of its start: a week.
MAX_AFTER_SECONDS = 7 * 24 * 3600


def not_before(data: RunCreate) -> datetime | None:
    """When a run with `after_seconds` starts (None: at once)."""
    after = data.after_seconds
    if not after:
        return None
    if not 0 < after <= MAX_AFTER_SECONDS:
        raise ValidationException(
            f"after_seconds is 0 to {MAX_AFTER_SECONDS} (a week), not {after}"
        )
    if data.command is not None:
        raise ValidationException(
            "after_seconds delays a new run: a `command` (resume, goto) goes on at once"
        )
    return utc_now() + timedelta(seconds=after)


def refuse_options(named: Sequence[str], onto: str) -> None:
    """A 400 naming each of LangGraph's options asked for that does not map onto Agency's
    `onto` (runs, schedules)."""
    if named:
        raise ValidationException(
            f"not mapped onto Agency {onto}: {', '.join(named)}; see docs/langgraph.md"
        )


def strategy_of(data: RunCreate) -> ConcurrencyStrategy:
    return STRATEGIES[data.multitask_strategy or "reject"]


def _parts(content: Any) -> tuple[ContentPart, ...]:
    if isinstance(content, str):
        return (ContentPart(type="text", text=content),)
    if isinstance(content, list):
        return parts_of(content)
    raise ValidationException("message content must be text or a list of content parts")


def _text(content: Any) -> str:
    parts = _parts(content)
    if has_images(parts):
        raise ValidationException("images are content of human messages only")
    return text_of(parts)


def _with_content(role: str, content: Any) -> ChatMessage:
    """A human message keeps its images (`parts`, beside its text); others are text."""
    if role != "user":
        return ChatMessage(role=role, content=_text(content))  # type: ignore[arg-type]
    parts = _parts(content)
    if not has_images(parts):
        return ChatMessage(role="user", content=text_of(parts))
    return ChatMessage(role="user", content=text_of(parts), parts=parts)


def _message(item: Any) -> ChatMessage:
    if isinstance(item, list | tuple) and len(item) == 2:
        role, content = item
    elif isinstance(item, dict):
        role, content = item.get("role") or item.get("type"), item.get("content", "")
    elif isinstance(item, str):
        role, content = "user", item
    else:
        raise ValidationException("input messages are {role|type, content} objects")
    if role == "tool" and isinstance(item, dict):
        # A client's answer to a call of one of its own tools (`tools`, below).
        call_id = item.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ValidationException("an input tool message names its call: `tool_call_id`")
        return ChatMessage(role="tool", content=_text(content), tool_call_id=call_id)
    mapped = _ROLES.get(str(role))
    if mapped is None:
        raise ValidationException(
            f"input message role {str(role)[:40]!r} does not map: use human, ai, system, or "
            "tool (answering a call of the client's own tool)"
        )
    return _with_content(mapped, content)


def _tools(raw: Any) -> tuple[ClientTool, ...]:
    """`input.tools`: the client's own tools (AG-UI's `{name, description, parameters}`,
    or OpenAI's `{type: "function", function: {...}}`), offered to the model, never run
    here: their calls end the run for the client to answer in its next input."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise ValidationException("input `tools` is a list of {name, description, parameters}")
    specs = [t.get("function") if isinstance(t.get("function"), dict) else t for t in raw]
    return offered((t.get("name"), t.get("description", ""), t.get("parameters")) for t in specs)


@dataclass(frozen=True, slots=True)
class Invocation:
    messages: tuple[ChatMessage, ...]
    files: dict[str, str]
    tools: tuple[ClientTool, ...] = ()

    def answering(self, open_calls: tuple[ToolCall, ...]) -> tuple[ChatMessage, ...]:
        """The messages, the thread's open calls (its client tools' calls) answered first
        (by the input's tool messages, else as not answered); 400 for a tool message that
        answers no open call."""
        open_ids = {c.id for c in open_calls}
        stray = [m.tool_call_id for m in self.messages if m.role == "tool"
                 and m.tool_call_id not in open_ids]  # fmt: skip
        if stray:
            raise ValidationException(
                f"input tool message for call {str(stray[0])[:80]!r} answers no open call of "
                "the thread (only a call of the client's own tools is left to answer)"
            )
        return answers(open_calls, self.messages) if open_calls else self.messages


def invocation(data: dict[str, Any] | None) -> Invocation:
    """`input`: `messages` (LangChain message dicts, `[role, content]` pairs or strings),
    `files` (path → text) and `tools` (the client's own tools). Other keys (a graph's own
    state, …) are ignored, as a graph ignores keys its state does not have."""
    data = data or {}
    raw = data.get("messages") or []
    files = data.get("files") or {}
    if not isinstance(raw, list) or not isinstance(files, dict):
        raise ValidationException("input `messages` must be a list and `files` an object")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValidationException("input `files` maps paths to text")
    messages = tuple(_message(m) for m in raw)
    check_inline_size(sum(inline_chars(m.parts) for m in messages))
    return Invocation(messages=messages, files=dict(files), tools=_tools(data.get("tools")))


def _decision(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else value
    match kind:
        case True | "approve" | "accept":
            return "approve"
        case False | "reject" | "ignore":
            return "reject"
        case "edit":
            return "edit"
    raise ValidationException(
        f"resume decision {str(kind)[:40]!r} does not map: use approve, edit or reject"
    )


def _edited(value: dict[str, Any], call: ToolCall) -> ToolCall:
    action = value.get("edited_action") or value.get("args") or {}
    if not isinstance(action, dict):
        raise ValidationException("an edit decision carries `edited_action: {name, args}`")
    name = action.get("name") or action.get("action") or call.name
    args = action.get("args", {})
    if not isinstance(name, str) or not isinstance(args, dict):
        raise ValidationException("an edit decision's action has a `name` and `args` object")
    return ToolCall(id=call.id, name=name, arguments=json.dumps(args))


def approval(resume: Any, pending: tuple[ToolCall, ...], interrupt_id: str) -> Approval:
    """`command.resume` as an approval of the pending tool calls.

    Accepted: `true`/`false`, `"approve"`/`"reject"`, `{"approved": bool, "reason"?}`,
    LangChain's `{"decisions": [{"type": "approve"|"edit"|"reject", …}, …]}` (one per
    pending call, in order, or a bare list of them), or any of these keyed by the interrupt
    id. Our approval is all-or-nothing: a mix of approvals and rejections is refused.
    """
    if isinstance(resume, dict) and interrupt_id in resume:
        resume = resume[interrupt_id]
    if isinstance(resume, dict) and isinstance(resume.get("approved"), bool):
        reason = resume.get("reason", "")
        return Approval(resume["approved"], None, reason if isinstance(reason, str) else "")
    decisions = resume.get("decisions") if isinstance(resume, dict) else resume
    if not isinstance(decisions, list):
        decisions = [decisions] * len(pending)
    if len(decisions) != len(pending):
        raise ValidationException(
            f"resume has {len(decisions)} decisions for {len(pending)} pending tool calls"
        )
    kinds = [_decision(d) for d in decisions]
    if all(k == "reject" for k in kinds):
        messages = [d.get("message", "") for d in decisions if isinstance(d, dict)]
        return Approval(False, None, "; ".join(m for m in messages if isinstance(m, str) and m))
    if "reject" in kinds:
        raise ValidationException(
            "rejecting some pending tool calls and approving others does not map: "
            "Agency approves or rejects a step's calls together"
        )
    edits = tuple(
        _edited(d, call)
        for d, k, call in zip(decisions, kinds, pending, strict=True)
        if k == "edit" and isinstance(d, dict)
    )
    return Approval(True, edits or None, "")
