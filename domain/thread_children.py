"""A thread's subagents as its state holds them: the registry of its children (the seed's
SubagentRegistryEntry), the reports they made, the variables provided for them, and what
each subagent event changes there. Pure, like the rest of the fold (`state.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol, get_args

from agency.contracts.events import (
    SubagentCompleted,
    SubagentMessaged,
    SubagentRequested,
    SubagentSpawned,
    SubagentStatus,
    SubagentTerminated,
    SubagentVariablesProvided,
)
from agency.contracts.events.subagent import ParentCommunication
from agency.domain.thread_parts import ToolOutcome

SubagentEvent = (
    SubagentRequested
    | SubagentMessaged
    | SubagentSpawned
    | SubagentVariablesProvided
    | SubagentStatus
    | SubagentTerminated
    | SubagentCompleted
)
# The events `child_changes` folds.
SUBAGENT_EVENTS = get_args(SubagentEvent)


@dataclass(frozen=True, slots=True)
class ChildEntry:
    """A child thread in the parent's registry (the seed's SubagentRegistryEntry).

    `status` is where the child is (`running`, its last outcome, or `terminated`, which
    stays); `status_text` is what it last said about itself (a session status tool or
    `set_status`), cleared when its status changes. The registry shows the text while there
    is one (`shown_status`)."""

    reference: str
    subagent_type: str
    tool_call_id: str
    name: str | None = None
    resumable: bool = False
    blocking: bool = True
    status: str = "running"
    status_text: str = ""
    token: str = ""
    title: str | None = None
    description: str = ""
    thread_name: str | None = None
    spawn_group_id: str | None = None
    created_at: datetime | None = None
    parent_communication: ParentCommunication = "implicit"

    @property
    def terminated(self) -> bool:
        return self.status == "terminated"

    @property
    def shown_status(self) -> str:
        return self.status_text or self.status


class ChildrenState(Protocol):
    """The part of a thread's state (`ThreadState`) that its subagent events change."""

    @property
    def requested(self) -> frozenset[str]: ...

    @property
    def outcomes(self) -> tuple[tuple[str, ToolOutcome], ...]: ...

    @property
    def spawn_requests(self) -> tuple[SubagentRequested, ...]: ...

    @property
    def children(self) -> tuple[ChildEntry, ...]: ...

    @property
    def reports(self) -> tuple[SubagentCompleted, ...]: ...

    @property
    def provided_sealed(self) -> tuple[str, ...]: ...

    def outcome(self, call_id: str) -> ToolOutcome | None: ...

    def child(self, reference: str) -> ChildEntry | None: ...


def child_changes(state: ChildrenState, payload: SubagentEvent, at: datetime) -> dict[str, object]:
    """The fields of `state` that a subagent event changes (none: it stays as it is).
    `at`: when the event was stored."""
    match payload:
        case SubagentRequested(tool_call_id=call_id):
            return {
                "requested": state.requested | {call_id},
                "spawn_requests": (*state.spawn_requests, payload),
            }
        case SubagentMessaged(tool_call_id=call_id, child_thread_id=child):
            return {"requested": state.requested | {call_id}, **_status(state, child, "running")}
        case SubagentSpawned(child_thread_id=child):
            if state.child(child) is not None:
                return {}  # a respawn of a known child (a fork's copy) keeps its entry
            entry = _entry(payload, state.spawn_requests, at)
            return {"children": (*state.children, entry)}
        case SubagentVariablesProvided(sealed_env=sealed):
            return {"provided_sealed": (*state.provided_sealed, sealed)}
        case SubagentStatus(child_thread_id=child, status=status):
            known = state.child(child)
            if known is None or known.terminated:
                return {}
            return {"children": _changed(state, child, status_text=status)}
        case SubagentTerminated(child_thread_id=child):
            return {"children": _changed(state, child, status="terminated", status_text="")}
        case SubagentCompleted(
            tool_call_id=call_id, child_thread_id=child, outcome=outcome, report=report
        ):
            # The report is the answer to the call that spawned or messaged the child,
            # unless that call was answered already (a non-blocking child's).
            changes: dict[str, object] = {
                "reports": (*state.reports, payload),
                **_status(state, child, outcome),
            }
            if state.outcome(call_id) is None:
                text = report if outcome == "completed" else f"Subagent {outcome}: {report}"
                answer = ToolOutcome(text, error=outcome != "completed")
                changes["outcomes"] = (*state.outcomes, (call_id, answer))
            return changes
    return {}


def _status(state: ChildrenState, reference: str, status: str) -> dict[str, object]:
    """A child's status changes, unless it was terminated (that stays)."""
    known = state.child(reference)
    if known is None or known.terminated:
        return {}
    return {"children": _changed(state, reference, status=status, status_text="")}


def _changed(state: ChildrenState, reference: str, **changes: object) -> tuple[ChildEntry, ...]:
    return tuple(
        replace(c, **changes) if c.reference == reference else c  # type: ignore[arg-type]
        for c in state.children
    )


def _entry(
    spawned: SubagentSpawned, requests: tuple[SubagentRequested, ...], at: datetime
) -> ChildEntry:
    """The registry entry of a new child: the spawn's values (an older spawn without them
    takes what its request said)."""
    request = next((r for r in requests if r.tool_call_id == spawned.tool_call_id), None)
    old = spawned.name is None and request is not None
    return ChildEntry(
        reference=spawned.child_thread_id,
        subagent_type=spawned.subagent_type,
        tool_call_id=spawned.tool_call_id,
        name=request.name if old and request else spawned.name,
        resumable=request.resumable if old and request else spawned.resumable,
        blocking=request.blocking if old and request else spawned.blocking,
        title=spawned.title,
        description=request.description if old and request else spawned.description,
        thread_name=spawned.thread_name,
        spawn_group_id=spawned.spawn_group_id,
        created_at=at,
        parent_communication=spawned.parent_communication,
        token=spawned.token,
    )
