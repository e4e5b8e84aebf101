"""Whether a thread's history is at rest: no run active or waiting, no call unanswered.

Only such a history is archived or imported: written into another deployment, a run in
progress would find no process carrying it on, and an unanswered call would be run again.
"""

from __future__ import annotations

from collections.abc import Sequence

from agency.domain.thread_state import ThreadState, fold
from agency.infra.jetstream.records import RecordedEvent


def restlessness(tenant_id: str, thread_id: str, events: Sequence[RecordedEvent]) -> str | None:
    """Why the thread is not at rest, or None when it is."""
    return why_busy(fold(tenant_id, thread_id, list(events)))


def why_busy(state: ThreadState) -> str | None:
    if state.active_run is not None:
        return f"run {state.active_run.run_id} is active"
    if state.queue:
        return f"run {state.queue[0].run_id} is waiting to start"
    unanswered = sorted(c for c in state.requested if state.outcome(c) is None)
    if unanswered:
        return f"tool call {unanswered[0]} is unanswered"
    return None
