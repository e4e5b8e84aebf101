"""A thread's log as AG-UI events: one run's text, tool calls, results, state and end.

`RunTranslator` folds every event of the thread (the history first, so the snapshots hold the
whole conversation) and translates those of the run it follows. Pure: no I/O.

Message ids are stable across runs: an assistant answer is `<run id>-<step>` (the id its
streamed text had), any other message the id of the event that appended it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from agency.contracts.events import (
    ChatMessage,
    FileWritten,
    MessageAppended,
    ModelCompleted,
    ModelDelta,
    RequestInjected,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    SubagentCompleted,
    SubagentSpawned,
    TodosWritten,
    ToolCall,
)
from agency.contracts.records import RecordedEvent
from agency.domain.thread_state import ThreadState, fold
from agency.services.api.agui.wire import (
    Cancelled,
    Event,
    FunctionCallOut,
    Interrupt,
    Interrupted,
    MessageIn,
    MessageOut,
    MessagesSnapshot,
    ReasoningEnd,
    ReasoningMessageContent,
    ReasoningMessageEnd,
    ReasoningMessageStart,
    ReasoningStart,
    RunErrorEvent,
    RunFinished,
    StateSnapshot,
    StepFinished,
    StepStarted,
    Success,
    TextMessageContent,
    TextMessageEnd,
    TextMessageStart,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallOut,
    ToolCallResult,
    ToolCallStart,
)

# What an approval's answer may hold: `approved`, and the call's arguments replaced whole.
APPROVAL_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "editedArgs": {"type": "object", "description": "The call's arguments, replaced whole."},
        "reason": {"type": "string"},
    },
    "required": ["approved"],
}


# How much of a call's arguments an interrupt's message shows (`metadata` has them whole).
_SHOWN = 500


def interrupt_id(run_id: str, call_id: str) -> str:
    """The interrupt that asks for a decision on one held call of a run."""
    return f"{run_id}:{call_id}"


def interrupts_of(run_id: str, calls: Iterable[ToolCall]) -> tuple[Interrupt, ...]:
    return tuple(
        Interrupt(
            id=interrupt_id(run_id, call.id),
            reason="tool_call",
            message=f"Run tool {call.name} with {call.arguments[:_SHOWN]}?",
            tool_call_id=call.id,
            response_schema=APPROVAL_SCHEMA,
            metadata={"toolName": call.name, "arguments": _arguments(call.arguments)},
        )
        for call in calls
    )


def _arguments(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return text


class RunTranslator:
    """Follows the run `run_id` (set it once the run is known) of one thread, for the
    AG-UI run `client_run_id`; `given`: the client's messages (their ids are kept)."""

    def __init__(
        self,
        tenant: str,
        thread_id: str,
        history: list[RecordedEvent],
        client_run_id: str,
        given: Sequence[MessageIn] = (),
    ) -> None:
        self.state: ThreadState = fold(tenant, thread_id, [])
        self.run_id: str | None = None
        self.done = False
        self._thread_id, self._client_run_id = thread_id, client_run_id
        self._messages: list[tuple[str, ChatMessage]] = []
        self._given = given
        self._answer_id: str | None = None  # the id of the assistant message to come
        self._open_text: set[str] = set()
        self._steps: dict[str, str] = {}
        for event in history:
            self._fold(event)

    # --- folding -------------------------------------------------------------------

    def _fold(self, event: RecordedEvent) -> None:
        self.state = self.state.apply(event)
        payload = event.payload
        if isinstance(payload, ModelCompleted):
            self._answer_id = f"{payload.run_id}-{payload.step}"
        elif isinstance(payload, MessageAppended):
            message_id = event.envelope.event_id
            if payload.message.role == "assistant" and self._answer_id is not None:
                message_id, self._answer_id = self._answer_id, None
            self._messages.append((message_id, payload.message))

    def snapshots(self) -> list[Event]:
        """The thread's state (todos, files) and its conversation as they stand."""
        state = {
            "todos": [{"content": t.content, "status": t.status} for t in self.state.todos],
            "files": dict(self.state.files),
        }
        ids = _client_ids(self._messages, self._given)
        messages = tuple(message_out(i, m) for i, (_, m) in zip(ids, self._messages, strict=True))
        return [StateSnapshot(snapshot=state), MessagesSnapshot(messages=messages)]

    # --- translating ---------------------------------------------------------------

    def apply(self, event: RecordedEvent) -> list[Event]:
        """The AG-UI events `event` makes; after the last (`done`), nothing more."""
        if self.done:
            return []
        self._fold(event)
        payload = event.payload
        if isinstance(payload, RequestInjected) and payload.request_run_id == self.run_id:
            self.run_id = payload.run_id  # the request joined the active run
            return []
        if self.run_id is None or getattr(payload, "run_id", None) != self.run_id:
            return []
        match payload:
            case ModelDelta(step=step, delta=delta) if delta:
                return self._text(f"{self.run_id}-{step}", delta)
            case ModelCompleted():
                return self._answered(payload)
            case MessageAppended(message=ChatMessage(role="tool") as message):
                return [
                    ToolCallResult(
                        message_id=event.envelope.event_id,
                        tool_call_id=message.tool_call_id or "",
                        content=message.content,
                    )
                ]
            case TodosWritten() | FileWritten():
                return self.snapshots()[:1]
            case SubagentSpawned(tool_call_id=call_id):
                child = payload.name or payload.subagent_type
                name = f"subagent {child} {payload.child_thread_id}"
                self._steps[call_id] = name
                return [StepStarted(step_name=name)]
            case SubagentCompleted(tool_call_id=call_id) if call_id in self._steps:
                return [StepFinished(step_name=self._steps.pop(call_id))]
            case RunCompleted(result=result):
                # Calls left open are the client's (its frontend tools), for it to answer.
                pending = tuple(c.id for c in self.state.open_tool_calls())
                return self._end(Success(pending_tool_call_ids=pending), result=result or None)
            case RunCanceled():
                return self._end(Cancelled())
            case RunPaused(reason="hitl"):
                view = self.state.run(self.run_id)
                calls = view.hitl_pending if view is not None else ()
                return self._end(Interrupted(interrupts=interrupts_of(self.run_id, calls)))
            case RunPaused(reason="subagent"):
                return []
            case RunPaused(reason=reason):
                return self._error(f"the run paused ({reason}) and waits", f"paused_{reason}")
            case RunError(error=error, kind=kind):
                return self._error(error or "the run failed", kind)
            case RequestRejected(reason=reason):
                return self._error(reason, "rejected")
        return []

    def _text(self, message_id: str, delta: str) -> list[Event]:
        out: list[Event] = []
        if message_id not in self._open_text:
            self._open_text.add(message_id)
            out.append(TextMessageStart(message_id=message_id))
        out.append(TextMessageContent(message_id=message_id, delta=delta))
        return out

    def _answered(self, completed: ModelCompleted) -> list[Event]:
        message_id = f"{completed.run_id}-{completed.step}"
        out: list[Event] = _reasoning(f"{message_id}-reasoning", completed.reasoning)
        if message_id not in self._open_text and completed.message.content:
            out.extend(self._text(message_id, completed.message.content))
        if message_id in self._open_text:
            self._open_text.discard(message_id)
            out.append(TextMessageEnd(message_id=message_id))
        for call in completed.message.tool_calls:
            out.append(
                ToolCallStart(
                    tool_call_id=call.id, tool_call_name=call.name, parent_message_id=message_id
                )
            )
            if call.arguments:
                out.append(ToolCallArgs(tool_call_id=call.id, delta=call.arguments))
            out.append(ToolCallEnd(tool_call_id=call.id))
        return out

    def _end(
        self, outcome: Success | Interrupted | Cancelled, result: str | None = None
    ) -> list[Event]:
        self.done = True
        finished = RunFinished(
            thread_id=self._thread_id, run_id=self._client_run_id, outcome=outcome, result=result
        )
        return [*self._close_text(), *self._close_steps(), *self.snapshots(), finished]

    def error(self, message: str, code: str) -> list[Event]:
        """End the run with `RUN_ERROR` (nothing follows it)."""
        return self._error(message, code)

    def _error(self, message: str, code: str) -> list[Event]:
        self.done = True
        return [
            *self._close_text(),
            *self._close_steps(),
            RunErrorEvent(message=message, code=code),
        ]

    def _close_steps(self) -> list[Event]:
        """A subagent still working when the run ends (spawned without blocking, or
        stopped) has its step finished with the run: AG-UI closes every step first."""
        ends: list[Event] = [StepFinished(step_name=name) for name in self._steps.values()]
        self._steps.clear()
        return ends

    def _close_text(self) -> list[Event]:
        ends: list[Event] = [TextMessageEnd(message_id=m) for m in sorted(self._open_text)]
        self._open_text.clear()
        return ends


def _reasoning(message_id: str, text: str) -> list[Event]:
    """A model step's reasoning as one AG-UI reasoning message (none when it has none)."""
    if not text:
        return []
    return [
        ReasoningStart(message_id=message_id),
        ReasoningMessageStart(message_id=message_id, role="reasoning"),
        ReasoningMessageContent(message_id=message_id, delta=text),
        ReasoningMessageEnd(message_id=message_id),
        ReasoningEnd(message_id=message_id),
    ]


def _client_ids(messages: list[tuple[str, ChatMessage]], given: Sequence[MessageIn]) -> list[str]:
    """Each message's id: the client's own for the messages it sent (matched in order by
    role and text, a tool result by its call), else ours."""
    ids: list[str] = []
    at = 0
    for message_id, message in messages:
        found = None
        if message.role != "assistant":
            found = next((n for n in range(at, len(given)) if _same(given[n], message)), None)
        if found is None:
            ids.append(message_id)
        else:
            ids.append(given[found].id)
            at = found + 1
    return ids


def _same(given: MessageIn, message: ChatMessage) -> bool:
    role = "system" if given.role == "developer" else given.role
    if role != message.role:
        return False
    if role == "tool":
        return given.tool_call_id == message.tool_call_id
    return isinstance(given.content, str) and given.content == message.content


def message_out(message_id: str, message: ChatMessage) -> MessageOut:
    calls = tuple(
        ToolCallOut(
            id=c.id, type="function", function=FunctionCallOut(name=c.name, arguments=c.arguments)
        )
        for c in message.tool_calls
    )
    return MessageOut(
        id=message_id,
        role=message.role,
        content=message.content if message.content or message.role != "assistant" else None,
        tool_calls=calls,
        tool_call_id=message.tool_call_id,
    )
