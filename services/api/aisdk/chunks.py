"""A run's events as UI message stream chunks (the AI SDK's `x-vercel-ai-ui-message-stream: v1`).

One run is one assistant message, its id the run's: `start` opens it, each model call is a
step (`start-step` … `finish-step`), its text `text-start`/`text-delta`/`text-end`, its
tool calls `tool-input-start`/`tool-input-delta`/`tool-input-available` and their results
`tool-output-available` (or `tool-output-error`). Calls a person must approve get a
`tool-approval-request` each, and the message ends with `finish` while the run waits; the
continuation after the decision is the same message (`tool-output-denied` for rejected
calls); other pauses for a person end it too, with their own finish reason. A subagent the
run spawns is a `data-subagent` part (id: the spawning call's), updated when it ends, its
report the call's output; the run waits for it in the same message. The run's end is
`finish`; its error `error`; its cancellation `abort`. Pure: events in, chunks out.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from agency.contracts.events import (
    HitlInterrupt,
    HitlResume,
    ModelCompleted,
    ModelDelta,
    ModelStarted,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    SubagentCompleted,
    SubagentSpawned,
    ToolCall,
    ToolError,
    ToolOutput,
)
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.aisdk.body import approval_id

Chunk = dict[str, Any]

# Pauses that wait for a person end the message, with the finish reason the SDK knows; a
# run paused for its subagents goes on by itself, in the same message.
_WAITS = {"hitl": "tool-calls", "breakpoint": "other", "exhausted": "length", "error": "error"}
_encoder = msgspec.json.Encoder()
DONE = b"data: [DONE]\n\n"


def sse(chunk: Chunk) -> bytes:
    """One chunk as its SSE frame: compact JSON, never a line break inside."""
    return b"data: " + _encoder.encode(chunk) + b"\n\n"


def run_of(event: RecordedEvent) -> str | None:
    run_id = getattr(event.payload, "run_id", None)
    return run_id if isinstance(run_id, str) else event.envelope.run_id


class MessageChunks:
    """The chunks of one run's message, event by event; `ended` once the message is over
    (the run ended, or it waits for a person and `pause_ends` is set)."""

    def __init__(self, run_id: str, pending: tuple[ToolCall, ...] = ()) -> None:
        """`pending`: the calls the run awaits a decision on, when the message is taken up
        after its `tool-approval-request`s."""
        self.run_id = run_id
        self.ended = False
        self._step_open = False
        self._texts: set[int] = set()  # steps whose text is open
        self._inputs: set[str] = set()  # tool calls whose input was sent
        self._outputs: set[str] = set()  # tool calls whose outcome was sent
        self._pending = pending
        self._children: dict[str, str] = {}  # spawning call → the subagent's type

    def start(self) -> list[Chunk]:
        return [{"type": "start", "messageId": self.run_id}]

    def after(self, event: RecordedEvent, *, pause_ends: bool = True) -> list[Chunk]:
        """The chunks `event` adds to the message (none for another run's event)."""
        if self.ended or run_of(event) != self.run_id:
            return []
        match event.payload:
            case ModelStarted():
                return [*self._close_step(), {"type": "start-step"}]
            case ModelDelta(step=step, delta=delta):
                return [*self._open_text(step), {"type": "text-delta", "id": self._text_id(step),
                                                 "delta": delta}]  # fmt: skip
            case ModelCompleted(step=step, message=message, reasoning=reasoning):
                return self._completed(step, message.content, message.tool_calls, reasoning)
            case ToolOutput(tool_call_id=call_id, output=output):
                self._outputs.add(call_id)
                return [{"type": "tool-output-available", "toolCallId": call_id,
                         "output": output}]  # fmt: skip
            case ToolError(tool_call_id=call_id, error=error):
                self._outputs.add(call_id)
                return [{"type": "tool-output-error", "toolCallId": call_id, "errorText": error}]
            case HitlInterrupt(proposed_tool_calls=calls):
                self._pending = calls
                out = [c for call in calls for c in self._input(call)]
                return [*out, *({"type": "tool-approval-request", "toolCallId": call.id,
                                 "approvalId": approval_id(self.run_id, call.id)}
                                for call in calls)]  # fmt: skip
            case HitlResume(approved=approved, modified_tool_calls=modified):
                return self._resumed(approved, modified)
            case SubagentSpawned(tool_call_id=call_id, child_thread_id=child) as spawned:
                self._children[call_id] = spawned.subagent_type
                return [_subagent(call_id, child, spawned.subagent_type, "running")]
            case SubagentCompleted(tool_call_id=call_id, child_thread_id=child) as done:
                kind = self._children.get(call_id, "")
                out = [_subagent(call_id, child, kind, done.outcome, done.report)]
                if call_id not in self._outputs:
                    # The child's report is the spawning call's result.
                    self._outputs.add(call_id)
                    out.append(_outcome(call_id, done.outcome, done.report))
                return out
            case RunPaused(reason=reason) if pause_ends and reason in _WAITS:
                return self._end({"type": "finish", "finishReason": _WAITS[reason]})
            case RunCompleted():
                return self._end({"type": "finish", "finishReason": "stop"})
            case RunError(error=error, kind=kind):
                return self._end({"type": "error", "errorText": f"{kind}: {error}"})
            case RunCanceled(reason=reason):
                return self._end({"type": "abort", "reason": reason or "canceled"})
            case RequestRejected(reason=reason):
                # A message sent again whose run was refused: the refusal is its answer.
                return self._end({"type": "error", "errorText": reason})
        return []

    def _text_id(self, step: int) -> str:
        return f"{self.run_id}.{step}.text"

    def _open_text(self, step: int) -> list[Chunk]:
        if step in self._texts:
            return []
        self._texts.add(step)
        return [{"type": "text-start", "id": self._text_id(step)}]

    def _completed(
        self, step: int, content: str, calls: tuple[ToolCall, ...], reasoning: str
    ) -> list[Chunk]:
        out: list[Chunk] = []
        if reasoning:
            rid = f"{self.run_id}.{step}.reasoning"
            out += [{"type": "reasoning-start", "id": rid},
                    {"type": "reasoning-delta", "id": rid, "delta": reasoning},
                    {"type": "reasoning-end", "id": rid}]  # fmt: skip
        if step in self._texts:
            out.append({"type": "text-end", "id": self._text_id(step)})
        elif content:
            tid = self._text_id(step)
            out += [{"type": "text-start", "id": tid},
                    {"type": "text-delta", "id": tid, "delta": content},
                    {"type": "text-end", "id": tid}]  # fmt: skip
        self._texts.discard(step)
        for call in calls:
            out += self._input(call)
        return out

    def _input(self, call: ToolCall) -> list[Chunk]:
        if call.id in self._inputs:
            return []
        self._inputs.add(call.id)
        return [
            {"type": "tool-input-start", "toolCallId": call.id, "toolName": call.name},
            {"type": "tool-input-delta", "toolCallId": call.id, "inputTextDelta": call.arguments},
            _available(call),
        ]

    def _resumed(self, approved: bool, modified: tuple[ToolCall, ...] | None) -> list[Chunk]:
        pending, self._pending = self._pending, ()
        if not approved:
            return [{"type": "tool-output-denied", "toolCallId": call.id} for call in pending]
        # Edited calls run with their new input.
        return [_available(call) for call in modified or ()]

    def _close_step(self) -> list[Chunk]:
        out: list[Chunk] = [
            {"type": "text-end", "id": self._text_id(s)} for s in sorted(self._texts)
        ]
        self._texts.clear()
        if self._step_open:
            out.append({"type": "finish-step"})
        self._step_open = True
        return out

    def _end(self, last: Chunk) -> list[Chunk]:
        self.ended = True
        out = self._close_step()
        self._step_open = False
        return [*out, last]


def _available(call: ToolCall) -> Chunk:
    try:
        value: Any = json.loads(call.arguments or "{}")
    except ValueError:
        value = call.arguments  # the model's text as it wrote it
    return {"type": "tool-input-available", "toolCallId": call.id, "toolName": call.name,
            "input": value}  # fmt: skip


def _subagent(call_id: str, child: str, kind: str, status: str, report: str = "") -> Chunk:
    data = {"toolCallId": call_id, "threadId": child, "subagentType": kind, "status": status}
    if report:
        data["report"] = report
    return {"type": "data-subagent", "id": call_id, "data": data}


def _outcome(call_id: str, outcome: str, report: str) -> Chunk:
    if outcome == "completed":
        return {"type": "tool-output-available", "toolCallId": call_id, "output": report}
    error = f"the subagent ended: {outcome}" + (f": {report}" if report else "")
    return {"type": "tool-output-error", "toolCallId": call_id, "errorText": error}
