"""The events a drive has decided and not appended yet: the state as if they were, and
which of them still stand when another writer got to the thread first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from agency.contracts.events import AnyEvent
from agency.domain.thread_state import ThreadState
from agency.services.runtime.checkpoint import simulate as simulate_appended


def simulate(state: ThreadState, events: Sequence[AnyEvent]) -> ThreadState:
    """The state as it will be once `events` are appended, before they are: the loop
    decides ahead on it. Its position stays the stored one, where the append goes."""
    if not events:
        return state
    return replace(simulate_appended(state, events), position=state.position)


def still_ours(before: ThreadState, after: ThreadState, pending: list[AnyEvent]) -> list[AnyEvent]:
    """After a conflict, the decisions in `pending` that still stand. When the active run is
    running at the same step with the same messages, another writer only added what does
    not touch it (a request queued, say): the model's answer and the tool results in
    `pending` go again, on top, and are not lost (nor the tools run twice). Otherwise (the
    run was canceled, or these very events were stored after all) nothing stands."""
    was, now = before.active_run, after.active_run
    same = (
        was is not None
        and now is not None
        and was.run_id == now.run_id
        and was.status == now.status == "running"
        and was.step == now.step
        and len(before.messages) == len(after.messages)
    )
    return pending if same else []
