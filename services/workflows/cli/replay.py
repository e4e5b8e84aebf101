"""A workflow's whole history from the log: its own events and every member thread's,
interleaved in log order, and re-executed without calling a model.

Re-execution checks both halves of a workflow against the current code:
- the controller: at every point the recorded controller decided something (a member
  invoked, skipped or answered), the pure decisions over the workflow's history up to that
  point must produce the same events;
- the members: their threads are re-executed together with the runtime code
  (`services.runtime.replay.reexecute`), answering each model call with its recorded result.
Nothing is written to the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from agency.contracts.events import (
    AnyEvent,
    RunCanceled,
    RunCompleted,
    RunError,
)
from agency.contracts.events.workflow import MemberOutcome
from agency.domain import workflow_decisions as decisions
from agency.domain.workflow_state import fold
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.runtime.replay.reexecute import Report, reexecute


@dataclass(frozen=True, slots=True)
class WorkflowRecord:
    workflow_id: str
    events: tuple[RecordedEvent, ...]
    members: dict[str, tuple[RecordedEvent, ...]]

    def timeline(self) -> list[tuple[str, RecordedEvent]]:
        """(who, event) in log order: `@workflow` or the member's name."""
        rows = [("@workflow", e) for e in self.events]
        for name, events in self.members.items():
            rows += [(name, e) for e in events]
        return sorted(rows, key=lambda row: row[1].stream_seq)


@dataclass(frozen=True, slots=True)
class ControllerDivergence:
    seq: int
    recorded: list[dict[str, Any]]
    decided: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class WorkflowReplay:
    decisions_checked: int
    divergence: ControllerDivergence | None
    members: Report

    @property
    def same(self) -> bool:
        return self.divergence is None and self.members.same


async def load_workflow(store: AggregateStore, tenant_id: str, workflow_id: str) -> WorkflowRecord:
    events = await store.read(tenant_id, "workflow", workflow_id)
    state = fold(events, workflow_id)
    members = {
        name: tuple(await store.read(tenant_id, "thread", m.thread_id))
        for name, m in sorted(state.members.items())
    }
    return WorkflowRecord(workflow_id, tuple(events), members)


def _signature(events: Sequence[AnyEvent]) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(e) for e in events]


def _terminals(record: WorkflowRecord) -> dict[str, tuple[MemberOutcome, str]]:
    """Each member run's outcome and text, as the member threads recorded them."""
    found: dict[str, tuple[MemberOutcome, str]] = {}
    for events in record.members.values():
        for e in events:
            match e.payload:
                case RunCompleted(run_id=run_id, result=text):
                    found[run_id] = ("completed", text)
                case RunError(run_id=run_id, error=text):
                    found[run_id] = ("error", text)
                case RunCanceled(run_id=run_id, reason=text):
                    found[run_id] = ("canceled", text)
    return found


def check_controller(record: WorkflowRecord) -> tuple[int, ControllerDivergence | None]:
    """Decide again at every controller decision of the record; the first difference.

    A decision's events are those appended with one idempotency key: `dispatch:…` (a pass
    over the inboxes), `answer:<run>` (a member run's end), `retried:<run>`."""
    events = list(record.events)
    terminals = _terminals(record)
    checked = 0
    i = 0
    while i < len(events):
        key = events[i].envelope.idempotency_key or ""
        group = [events[i]]
        while key and i + len(group) < len(events):
            if events[i + len(group)].envelope.idempotency_key != key:
                break
            group.append(events[i + len(group)])
        state = fold(events[:i], record.workflow_id)
        decided: list[AnyEvent] | None = None
        if key.startswith("dispatch:"):
            decided = decisions.dispatch(state)
        elif key.startswith("answer:"):
            run_id = key.removeprefix("answer:")
            outcome, text = terminals.get(run_id, ("canceled", "no terminal recorded"))
            decided = decisions.answer(state, run_id=run_id, outcome=outcome, text=text)
        elif key.startswith("retried:"):
            failed = key.removeprefix("retried:")
            invocation = state.invocations.get(failed)
            decided = decisions.retry(state, invocation.member if invocation else "", failed)
        i += len(group)
        if decided is None:
            continue
        checked += 1
        want = _signature([e.envelope.payload for e in group])
        got = _signature(decided)
        if want != got:
            return checked, ControllerDivergence(group[0].seq, want, got)
    return checked, None


async def replay_workflow(
    record: WorkflowRecord,
    system: AgentSystem,
    *,
    agency_events: Sequence[RecordedEvent] = (),
) -> WorkflowReplay:
    checked, divergence = check_controller(record)
    members = await reexecute(
        [list(events) for events in record.members.values()],
        system,
        agency_events=agency_events,
    )
    return WorkflowReplay(checked, divergence, members)
