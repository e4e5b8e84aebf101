"""What a parent's (or a child's) history says about its subagents: pure queries the
coordinator decides by, so a redelivered event finds what it already did."""

from __future__ import annotations

from dataclasses import dataclass

from agency.contracts.events import (
    FileWritten,
    RunCanceled,
    RunCompleted,
    RunError,
    SubagentCompleted,
    SubagentMessaged,
    SubagentRequested,
    SubagentSpawned,
    SubagentTerminated,
)
from agency.domain.child_naming import child_run_id, child_thread_id, message_run_id
from agency.infra.jetstream.records import RecordedEvent


@dataclass(frozen=True, slots=True)
class Origin:
    """The parent call that started a child's run."""

    run_id: str
    tool_call_id: str
    blocking: bool


def files_of(history: list[RecordedEvent], run_id: str | None = None) -> dict[str, str]:
    """Latest content per path; with `run_id`, only files the agent wrote in that run."""
    files: dict[str, str] = {}
    for e in history:
        if isinstance(e.payload, FileWritten) and (
            run_id is None or (e.payload.run_id == run_id and e.payload.origin == "tool")
        ):
            files[e.payload.path] = e.payload.content
    return files


def call_of(history: list[RecordedEvent], child: str, child_run: str) -> Origin | None:
    """Which of the parent's calls started the child's run `child_run`."""
    for e in history:
        match e.payload:
            case SubagentRequested(run_id=run_id, tool_call_id=call_id, blocking=blocking):
                if (
                    child_run == child_run_id(child)
                    and child_thread_id(e.envelope.tenant_id, e.envelope.aggregate_id, call_id)
                    == child
                ):
                    return Origin(run_id, call_id, blocking)
            case SubagentMessaged(
                run_id=run_id, tool_call_id=call_id, child_thread_id=target, blocking=blocking
            ):
                if target == child and message_run_id(child, call_id) == child_run:
                    return Origin(run_id, call_id, blocking)
    return None


def spawn_moot(history: list[RecordedEvent], request: SubagentRequested, child: str) -> bool:
    """A child asked for and not yet linked that must not be spawned any more: its run was
    canceled (a fork's cut cancels it too), or, for a blocking call, the run ended without
    waiting for it. A non-blocking call was answered when it was made, so its child is
    spawned however the run ended later; a deferred one was asked for after the run."""
    if request.deferred or has_link(history, child):
        return False
    for e in history:
        match e.payload:
            case RunCanceled(run_id=run_id) if run_id == request.run_id:
                return True
            case RunCompleted(run_id=run_id) | RunError(run_id=run_id) if (
                run_id == request.run_id and request.blocking
            ):
                return True
    return False


def with_attachments(text: str, files: dict[str, str]) -> str:
    if not files:
        return text
    return f"{text}\n\nAttached files: {', '.join(files)}"


def has_link(history: list[RecordedEvent], child: str) -> bool:
    return any(
        isinstance(e.payload, SubagentSpawned) and e.payload.child_thread_id == child
        for e in history
    )


def was_terminated(history: list[RecordedEvent], child: str) -> bool:
    return any(
        isinstance(e.payload, SubagentTerminated) and e.payload.child_thread_id == child
        for e in history
    )


def has_report(history: list[RecordedEvent], tool_call_id: str) -> bool:
    return any(
        isinstance(e.payload, SubagentCompleted) and e.payload.tool_call_id == tool_call_id
        for e in history
    )
