"""What the fake LLM answers: scripted steps, or the offline demo agent.

Every answer is a pure function of the request (plus, for scripted failures, a count of
failures per script step), so concurrent threads, retries and re-executions of a step get
the same answer, including the same tool call ids.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import msgspec

from agency.contracts.events.base import ToolCall, Usage
from agency.services.llm.fake_calls import call_reply
from agency.services.llm.fake_request import ChatRequest

# --- scripts -----------------------------------------------------------------------------


class ScriptToolCall(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    arguments: dict[str, Any] | str = "{}"

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


# How a scripted answer misbehaves (see `ScriptStep.fault`).
Fault = Literal[
    "malformed_chunk",  # one chunk of the stream is not JSON; the rest follows normally
    "html",  # HTTP 200 with an HTML page (a proxy's error page)
    "not_openai_json",  # HTTP 200 with JSON that is no chat completion
    "hang",  # never answers: no status, no headers
    "stall",  # streams `fault_after` chunks, then goes silent
    "truncated",  # streams `fault_after` chunks, then ends the body without [DONE]
    "disconnect",  # streams `fault_after` chunks, then drops the connection
    "duplicate_tool_call_ids",  # every tool call carries the first call's id
    "missing_tool_call_ids",  # tool calls carry no id
    "unstreamed",  # a whole completion, though the request asked for a stream
]
STREAM_FAULTS: frozenset[Fault] = frozenset({"malformed_chunk", "stall", "truncated", "disconnect"})


class ScriptStep(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted model answer.

    `status` makes the first `times` attempts at this step answer that HTTP error (with
    `retry_after_ms` as a `retry-after-ms` header when set); `stream_error_after` instead
    breaks the first `times` streamed attempts with an error event after that many chunks;
    `fault` makes the first `times` attempts misbehave that way (the stream faults act after
    `fault_after` chunks). Later attempts answer normally. `delay_ms` (plus a random
    0..`jitter_ms`) waits before answering, `stream_delay_ms` between streamed chunks.
    `repeat` repeats `content` (a huge answer without a huge script). `reasoning` is what
    the model reasons before it answers, streamed first as `reasoning_content` (as DeepSeek
    sends it). `usage` overrides the
    chars/4 token estimate. Invalid tool arguments need no fault: give `arguments` as a
    string that is not JSON.
    """

    content: str = ""
    tool_calls: tuple[ScriptToolCall, ...] = ()
    reasoning: str = ""
    delay_ms: int = 0
    jitter_ms: int = 0
    stream_delay_ms: int = 0
    status: int | None = None
    stream_error_after: int | None = None
    fault: Fault | None = None
    fault_after: int = 1
    times: int = 1
    retry_after_ms: int | None = None
    repeat: int = 1
    usage: Usage | None = None

    def __post_init__(self) -> None:
        if self.repeat < 1 or self.times < 0 or self.fault_after < 0:
            raise ValueError("repeat must be at least 1, times and fault_after at least 0")
        if min(self.delay_ms, self.jitter_ms, self.stream_delay_ms) < 0:
            raise ValueError("delays must not be negative")


# How a script's steps are counted: from each user message on (a turn: step 0 answers every
# new user message), or across the whole conversation (step N answers the request with N
# assistant messages before it, whichever turn it is in).
StepCount = Literal["turn", "conversation"]


class Script(msgspec.Struct, frozen=True, kw_only=True):
    """The body of `POST /_scripts`."""

    key: str
    steps: tuple[ScriptStep, ...]
    count: StepCount = "turn"


# --- replies -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Failure:
    status: int
    message: str
    retry_after_ms: int | None = None
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Reply:
    id: str
    content: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    delay: float = 0.0
    stream_delay: float | None = None  # None: the server's default pacing
    stream_error_after: int | None = None
    fault: Fault | None = None
    fault_after: int = 1
    reasoning: str = ""

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.tool_calls else "stop"


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:12]


def _conversation(request: ChatRequest) -> Iterable[str]:
    """The text that identifies a conversation: its system and user messages."""
    return (m.text for m in request.messages if m.role in ("system", "user", "developer"))


def _input_tokens(request: ChatRequest) -> int:
    chars = 0
    for m in request.messages:
        chars += len(m.text)
        chars += sum(len(c.function.name) + len(c.function.arguments) for c in m.tool_calls or ())
    return math.ceil(chars / 4)


def _reply(
    request: ChatRequest,
    key: str,
    content: str,
    calls: Sequence[tuple[str, str]],
    usage: Usage | None = None,
    **timing: Any,
) -> Reply:
    step = request.step
    # Same key, step and conversation give the same ids; other threads get other ids.
    digest = _digest(key, str(step), *_conversation(request))
    tool_calls = tuple(
        ToolCall(id=f"call_{step}_{i}_{digest[:8]}", name=name, arguments=args)
        for i, (name, args) in enumerate(calls)
    )
    if usage is None:
        output = content + "".join(c.name + c.arguments for c in tool_calls)
        usage = Usage(input_tokens=_input_tokens(request), output_tokens=estimate_tokens(output))
    return Reply(
        id=f"chatcmpl-{digest}",
        content=content,
        tool_calls=tool_calls,
        usage=usage,
        **timing,
    )


class ScriptBook:
    """Scripts by key, and how often each scripted failure has been served."""

    def __init__(self) -> None:
        self._scripts: dict[str, tuple[ScriptStep, ...]] = {}
        self._counts: dict[str, StepCount] = {}
        self._failures: Counter[tuple[str, int]] = Counter()

    def add(
        self,
        key: str,
        steps: Sequence[ScriptStep | Mapping[str, Any]],
        count: StepCount = "conversation",
    ) -> None:
        if not key:
            raise ValueError("a script key must not be empty: it would match every request")
        # Steps built in Python may hold plain dicts (`tool_calls=[{"name": ...}]`), which a
        # Struct does not check on init: a round trip through builtins validates every step.
        self._scripts[key] = tuple(
            msgspec.convert(msgspec.to_builtins(s), ScriptStep) for s in steps
        )
        self._counts[key] = count
        self._failures = Counter({k: n for k, n in self._failures.items() if k[0] != key})

    def clear(self, key: str | None = None) -> None:
        if key is None:
            self._scripts.clear()
            self._counts.clear()
            self._failures.clear()
            return
        self._scripts.pop(key, None)
        self._counts.pop(key, None)
        self._failures = Counter({k: n for k, n in self._failures.items() if k[0] != key})

    def match(self, request: ChatRequest) -> str | None:
        """The script whose key occurs in a system or user message; the longest key wins."""
        texts = list(_conversation(request))
        found = [k for k in self._scripts if any(k in t for t in texts)]
        return max(found, key=lambda k: (len(k), k)) if found else None

    def answer(self, request: ChatRequest) -> Reply | Failure:
        key = self.match(request)
        if key is None:
            return demo_reply(request)
        steps = self._scripts[key]
        per_turn = self._counts.get(key) == "turn"
        step_index = request.turn_step if per_turn else request.step
        if step_index >= len(steps):
            return _reply(request, key, "done", ())
        step = steps[step_index]
        delay = (step.delay_ms + random.uniform(0, step.jitter_ms)) / 1000
        failing = self._failures[(key, step_index)] < step.times
        if step.status is not None and failing:
            self._failures[(key, step_index)] += 1
            return Failure(
                status=step.status,
                message=f"scripted failure {self._failures[(key, step_index)]}/{step.times} "
                f"of step {step_index} of script {key!r}",
                retry_after_ms=step.retry_after_ms,
                delay=delay,
            )
        stream_error_after = None
        if step.stream_error_after is not None and failing and request.stream:
            self._failures[(key, step_index)] += 1
            stream_error_after = step.stream_error_after
        fault = None
        if (
            step.fault is not None
            and failing
            and (request.stream or step.fault not in STREAM_FAULTS)
        ):
            self._failures[(key, step_index)] += 1
            fault = step.fault
        reply = _reply(
            request,
            key,
            step.content * step.repeat,
            [(c.name, c.arguments_json()) for c in step.tool_calls],
            step.usage,
            delay=delay,
            stream_delay=step.stream_delay_ms / 1000 if step.stream_delay_ms else None,
            stream_error_after=stream_error_after,
            fault=fault,
            fault_after=step.fault_after,
            reasoning=step.reasoning,
        )
        return _with_id_fault(reply)


def _with_id_fault(reply: Reply) -> Reply:
    """The reply's tool calls as a faulty server would number them."""
    if not reply.tool_calls:
        return reply
    if reply.fault == "duplicate_tool_call_ids":
        first = reply.tool_calls[0].id
        calls = tuple(msgspec.structs.replace(c, id=first) for c in reply.tool_calls)
    elif reply.fault == "missing_tool_call_ids":
        calls = tuple(msgspec.structs.replace(c, id="") for c in reply.tool_calls)
    else:
        return reply
    return replace(reply, tool_calls=calls)


# --- the offline demo agent --------------------------------------------------------------


def _shorten(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def demo_reply(request: ChatRequest) -> Reply:
    """Call the tools the latest user message asks for (`CALL name {args}` lines, see
    `fake_calls`); else plan with write_todos, write notes.md with write_file, then
    answer; each if offered."""
    asked = call_reply(request)
    if asked is not None:
        return _reply(request, "", *asked)
    asks = [m.text for m in request.messages if m.role == "user" and m.text.strip()]
    ask = asks[-1] if asks else "your request"
    short = _shorten(ask, 80)
    offered = request.tool_names
    called = request.called()
    task = request.tool("task")
    kinds = task.enum_of("subagentType") if task is not None else []
    if kinds and "task" not in called:
        calls = [
            ("task", json.dumps({"description": f"{part} of: {short}", "subagentType": kinds[0]}))
            for part in ("Research the first half", "Research the second half")
        ]
        return _reply(request, "", "I will split this between two subagents.", calls)
    if "task" in called:
        reports = [m.text for m in request.messages if m.role == "tool" and m.text.strip()]
        summary = " | ".join(_shorten(r, 60) for r in reports[-2:])
        return _reply(request, "", f"Done. Both subagents reported: {summary}", ())
    if "write_todos" in offered and "write_todos" not in called:
        todos = [{"content": f"Understand the request: {short}", "status": "in_progress"}]
        if "write_file" in offered:
            todos.append({"content": "Write notes.md with a short summary", "status": "pending"})
        todos.append({"content": "Report back with the result", "status": "pending"})
        args = json.dumps({"todos": todos}, ensure_ascii=False)
        return _reply(request, "", "Let me plan this first.", [("write_todos", args)])
    if "write_file" in offered and "write_file" not in called:
        notes = f"# Notes\n\n## Request\n\n{_shorten(ask, 400)}\n\n## Summary\n\n- {short}\n"
        args = json.dumps({"path": "notes.md", "content": notes}, ensure_ascii=False)
        return _reply(request, "", "Writing my notes to notes.md.", [("write_file", args)])
    handoff = _handoff(request)
    if handoff is not None:
        return _reply(request, "", f"My part is done. {handoff}, over to you.", ())
    done = []
    if "write_todos" in called:
        done.append("planned the work")
    if "write_file" in called:
        done.append("wrote notes.md")
    did = f"I {' and '.join(done)}" if done else "I looked at your request"
    return _reply(request, "", f"Done. {did}: {_quoted(ask)}", ())


_HANDOFF = re.compile(r"\b(?:hand|pass)(?: it)? (?:over|on|off) to (@[A-Za-z0-9_-]+)", re.I)


def _quoted(ask: str) -> str:
    """The ask, short, for an answer: in a workflow the last message of the inbox, and
    without `@`, since quoting a mention would address that member again."""
    lines = [line for line in ask.splitlines() if line.startswith("[@")]
    text = lines[-1].split("] ", 1)[-1] if lines else ask
    return _shorten(text.replace("@", ""), 80).rstrip(".")


def _handoff(request: ChatRequest) -> str | None:
    """In a workflow, the member its instructions say to hand over to (`hand over to
    @name`), so an offline workflow moves along its chain of mentions."""
    for m in request.messages:
        if m.role == "system" and (found := _HANDOFF.search(m.text)):
            return found.group(1)
    return None


# --- chunking ----------------------------------------------------------------------------

_WORDS = re.compile(r"\s*\S+|\s+$")


def text_chunks(text: str) -> list[str]:
    """Word-sized pieces whose concatenation is `text`."""
    return _WORDS.findall(text)


def argument_fragments(arguments: str) -> list[str]:
    """At least two pieces, as OpenAI streams arguments in fragments."""
    size = max(1, math.ceil(len(arguments) / 3))
    pieces = [arguments[i : i + size] for i in range(0, len(arguments), size)]
    while len(pieces) < 2:
        pieces.append("")
    return pieces
