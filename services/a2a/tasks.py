"""A thread's runs as A2A tasks, folded from the thread's log.

The context is the thread; a task is one run, named `<thread id>.<run id>` (ids never hold
a `.`), so a task id alone finds its thread. A run's state maps onto the task's:

    queued (accepted)             TASK_STATE_SUBMITTED
    running, resumed              TASK_STATE_WORKING
    paused for approval           TASK_STATE_INPUT_REQUIRED (the calls in the status message)
    completed                     TASK_STATE_COMPLETED (the result as the artifact `result`)
    error                         TASK_STATE_FAILED
    canceled                      TASK_STATE_CANCELED
    rejected                      TASK_STATE_REJECTED

The history is the run's user and assistant messages with text. The user's message keeps
the `messageId` it was sent with (the run's idempotency key).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from agency.contracts.events import (
    HitlInterrupt,
    HitlResume,
    MessageAppended,
    RequestAccepted,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    RunResumed,
    RunStarted,
    ToolCall,
)
from agency.infra.jetstream.records import RecordedEvent
from agency.services.a2a.wire import (
    Artifact,
    Message,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

SEPARATOR = "."
RESULT_ARTIFACT = "result"
APPROVE_HINT = (
    "Answer on this task with a message: the text 'approve' or 'reject' (a reason may follow "
    'a rejection), or a data part {"approved": true|false, "reason": "..."}.'
)


def task_id(thread_id: str, run_id: str) -> str:
    return f"{thread_id}{SEPARATOR}{run_id}"


def split_task_id(value: str) -> tuple[str, str] | None:
    """(thread id, run id) of a task id, or None if it names no run."""
    thread_id, sep, run_id = value.partition(SEPARATOR)
    return (thread_id, run_id) if sep and thread_id and run_id else None


def _stamp(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _call(call: ToolCall) -> dict[str, object]:
    try:
        args = json.loads(call.arguments or "{}")
    except ValueError:
        args = call.arguments
    return {"id": call.id, "name": call.name, "args": args}


@dataclass
class RunTask:
    """One run as a task, as far as its events have been folded."""

    thread_id: str
    run_id: str
    state: TaskState = "TASK_STATE_SUBMITTED"
    status_message: Message | None = None
    updated: str = ""
    history: list[Message] = field(default_factory=list)
    result: str | None = None
    pending: tuple[ToolCall, ...] = ()

    @property
    def id(self) -> str:
        return task_id(self.thread_id, self.run_id)

    def status(self) -> TaskStatus:
        return TaskStatus(state=self.state, message=self.status_message, timestamp=self.updated)

    def artifacts(self) -> list[Artifact]:
        if self.result is None:
            return []
        return [Artifact(artifact_id=RESULT_ARTIFACT, name=RESULT_ARTIFACT,
                         parts=[Part(text=self.result)])]  # fmt: skip

    def task(self, history_length: int | None = None, *, artifacts: bool = True) -> Task:
        history = self.history
        if history_length is not None:
            history = history[-history_length:] if history_length > 0 else []
        return Task(
            id=self.id,
            context_id=self.thread_id,
            status=self.status(),
            artifacts=(self.artifacts() or None) if artifacts else None,
            history=history or None,
        )

    def status_event(self) -> StreamResponse:
        update = TaskStatusUpdateEvent(
            task_id=self.id, context_id=self.thread_id, status=self.status()
        )
        return StreamResponse(status_update=update)

    def artifact_event(self) -> StreamResponse:
        (artifact,) = self.artifacts()
        update = TaskArtifactUpdateEvent(
            task_id=self.id, context_id=self.thread_id, artifact=artifact, last_chunk=True
        )
        return StreamResponse(artifact_update=update)

    def agent_message(self, event: RecordedEvent, text: str, data: object = None) -> Message:
        parts = [Part(text=text)]
        if data is not None:
            parts.append(Part(data=data, media_type="application/json"))
        return Message(
            message_id=f"{self.run_id}-{event.seq}",
            context_id=self.thread_id,
            task_id=self.id,
            role="ROLE_AGENT",
            parts=parts,
        )


@dataclass(frozen=True, slots=True)
class Change:
    """What an event changed of a task: its status, or its artifact."""

    task: RunTask
    kind: str  # "status" | "artifact"


class ThreadTasks:
    """Every run of one thread as a task: `apply` each event of the log in order."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.runs: dict[str, RunTask] = {}

    def get(self, run_id: str) -> RunTask | None:
        return self.runs.get(run_id)

    def apply(self, event: RecordedEvent) -> list[Change]:
        payload = event.payload
        run_id = getattr(payload, "run_id", None)
        if not isinstance(run_id, str):
            return []
        run = self.runs.get(run_id)
        if run is None:
            if not isinstance(payload, RequestAccepted):
                return []
            run = self.runs[run_id] = RunTask(self.thread_id, run_id)
        stamp = _stamp(event.envelope.ts)
        before = run.state
        artifact = False
        match payload:
            case RequestAccepted(idempotency_key=key, messages=messages) if not run.updated:
                run.history.extend(
                    Message(message_id=key if i == 0 else f"{key}-{i}", context_id=self.thread_id,
                            task_id=run.id, role="ROLE_USER", parts=[Part(text=m.content)])
                    for i, m in enumerate(messages) if m.role == "user" and m.content
                )  # fmt: skip
            case MessageAppended(message=m) if m.role == "assistant" and m.content:
                run.history.append(run.agent_message(event, m.content))
            case RunStarted() | RunResumed() | HitlResume():
                run.state, run.status_message, run.pending = "TASK_STATE_WORKING", None, ()
            case HitlInterrupt(proposed_tool_calls=calls):
                run.pending = calls
            case RunPaused(reason=reason) if reason in ("hitl", "breakpoint"):
                run.state = "TASK_STATE_INPUT_REQUIRED"
                names = ", ".join(c.name for c in run.pending) or "the next step"
                run.status_message = run.agent_message(
                    event,
                    f"Approval needed for {names}. {APPROVE_HINT}",
                    {"toolCalls": [_call(c) for c in run.pending]},
                )
            case RunCompleted(result=result):
                run.state, run.status_message = "TASK_STATE_COMPLETED", None
                run.result = result or _last_agent_text(run)
                artifact = True
            case RunError(error=error):
                run.state = "TASK_STATE_FAILED"
                run.status_message = run.agent_message(event, error)
            case RunCanceled(reason=reason):
                run.state = "TASK_STATE_CANCELED"
                run.status_message = run.agent_message(event, reason or "canceled")
            case RequestRejected(reason=reason):
                run.state = "TASK_STATE_REJECTED"
                run.status_message = run.agent_message(event, reason)
        if run.state == before and not artifact and run.updated:
            return []
        run.updated = stamp
        changes = [Change(run, "artifact")] if artifact else []
        return [*changes, Change(run, "status")]


def _last_agent_text(run: RunTask) -> str:
    for message in reversed(run.history):
        if message.role == "ROLE_AGENT" and message.parts and message.parts[0].text:
            return message.parts[0].text
    return ""


def fold(thread_id: str, events: list[RecordedEvent]) -> ThreadTasks:
    tasks = ThreadTasks(thread_id)
    for event in events:
        tasks.apply(event)
    return tasks
