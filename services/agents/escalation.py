"""Escalation from a child thread to its parent: the events `notify_parent` and
`set_status` append to the child (`services/agents/builtin/parent.py` has the tools;
`MiddlewareContext` the hooks' methods)."""

from __future__ import annotations

from agency.contracts.events import AnyEvent, ChildStatusSet, ParentNotified
from agency.services.agents.view import ThreadView

# A status is a line in a registry, not a report.
MAX_STATUS_CHARS = 500


class NotAChild(Exception):
    """Escalation asked of a thread that has no parent."""

    def __init__(self, thread_id: str) -> None:
        super().__init__(f"thread {thread_id} is no subagent: it has no parent to escalate to")


def notify_event(state: ThreadView, run_id: str | None, content: str) -> AnyEvent:
    if state.parent is None:
        raise NotAChild(state.thread_id)
    if not content.strip():
        raise ValueError("notify_parent needs non-empty content")
    return ParentNotified(run_id=run_id, content=content)


def status_event(state: ThreadView, run_id: str | None, status: str) -> AnyEvent:
    if state.parent is None:
        raise NotAChild(state.thread_id)
    if not status.strip():
        raise ValueError("set_status needs a non-empty status")
    if len(status) > MAX_STATUS_CHARS:
        raise ValueError(f"a status is at most {MAX_STATUS_CHARS} characters")
    return ChildStatusSet(run_id=run_id, status=status)
