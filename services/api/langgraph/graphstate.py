"""A thread as LangGraph sees it, folded from the thread's events (the log, never a read model).

The runtime's own fold (`domain.thread_state`) gives runs, approvals and files; this adds
what LangGraph clients read: messages as LangChain message dicts with stable ids, the state
`values` (`messages`, `todos`, `files`), the pending interrupt, and the thread's status.

A LangGraph run is one stretch of one of our runs: ours from its start (LangGraph run id =
our run id) or from a resume (`<run id>~<seq>`: what follows the thread's event `seq`). A
stretch ends when the run ends or pauses (for approval, or at a breakpoint before a model
call); a resume starts the next stretch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agency.contracts.events import (
    HistoryPruned,
    HitlInterrupt,
    HitlResume,
    MessageAppended,
    ModelCompleted,
    RequestAccepted,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    StateRestored,
    StateUpdated,
    ThreadCreated,
    ThreadMetadataSet,
)
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.api.langgraph.messages import ai_message_id, interrupt_value, message_dict
from agency.services.api.langgraph.wire import Interrupt, RunStatus, ThreadStatus
from agency.services.api.runstatus import RunStatuses

RESUME_MARK = "~"
# Events that change `values`; with interrupts and breakpoints, each is a checkpoint of the
# thread's history (`is_checkpoint`).
VALUE_EVENTS = frozenset(
    {"message.appended", "file.written", "todos.written", "thread.state_restored"}
)
CHECKPOINT_EVENTS = VALUE_EVENTS | {"hitl.interrupt"}
# The pauses that end a stretch: for approval of tool calls (an interrupt, or a breakpoint
# before tools), and at a breakpoint before a model call (`interrupt_before=["model"]`,
# `interrupt_after=["tools"]`). A resume (`hitl.resume`) begins the next stretch.
STRETCH_PAUSES = frozenset({"hitl", "breakpoint"})


def is_checkpoint(event: RecordedEvent) -> bool:
    """The event is a checkpoint: it changed the values, raised an interrupt, or paused the
    run at a breakpoint before a model call (the state there has `next: ["model"]`)."""
    if event.type in CHECKPOINT_EVENTS:
        return True
    return isinstance(event.payload, RunPaused) and event.payload.reason == "breakpoint"


@dataclass(frozen=True, slots=True)
class RunRef:
    """A LangGraph run: our run `run_id`, from after the thread's event `after_seq`."""

    run_id: str
    after_seq: int = 0

    @property
    def id(self) -> str:
        return f"{self.run_id}{RESUME_MARK}{self.after_seq}" if self.after_seq else self.run_id

    @classmethod
    def parse(cls, lg_run_id: str) -> RunRef | None:
        run_id, mark, seq = lg_run_id.partition(RESUME_MARK)
        if not mark:
            return cls(run_id)
        return cls(run_id, int(seq)) if seq.isdigit() and 0 < len(seq) <= 18 else None


def ends_stretch(event: RecordedEvent, ref: RunRef) -> bool:
    """The event ends the stretch `ref`: the run ended, was refused, or awaits approval."""
    if event.seq <= ref.after_seq or getattr(event.payload, "run_id", None) != ref.run_id:
        return False
    match event.payload:
        case RunPaused(reason=reason) if reason in STRETCH_PAUSES:
            return True
        case RunCompleted() | RunError() | RunCanceled():
            return True
        case RequestRejected():
            return True
    return False


@dataclass
class GraphView:
    """Fold events in order with `apply`; read `values()`, `interrupts()`, `status()`."""

    tenant_id: str
    thread_id: str
    state: ThreadState = field(init=False)
    created: ThreadCreated | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_seq: int = 0
    # Where the last event folded stands in the log: a fold goes on from there.
    position: Position = field(default_factory=Position)
    # Every run's status, as an invoke's wait reads them: it goes on from `position`.
    runs: RunStatuses = field(default_factory=RunStatuses)
    # The latest checkpoint (the seq of the last event that changed the values or raised an
    # interrupt) and the one before it.
    checkpoint_seq: int = 0
    parent_seq: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The event id of each run's latest hitl.interrupt (the LangGraph interrupt id), and the
    # seqs at which each run paused for approval or at a breakpoint (`STRETCH_PAUSES`).
    interrupt_ids: dict[str, str] = field(default_factory=dict)
    pauses: dict[str, list[int]] = field(default_factory=dict)
    # The seqs of the events that ended a stretch of each run (`ends_stretch`).
    stretch_ends: dict[str, list[int]] = field(default_factory=dict)
    # Per run: when it was asked for, when it last changed, and its invoke strategy.
    run_times: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)
    strategies: dict[str, str] = field(default_factory=dict)
    # Metadata set after the thread's creation (`thread.metadata_set`), merged; replaced,
    # never changed in place.
    metadata_set: dict[str, str] = field(default_factory=dict)
    # Per run, and per stretch resumed (`<run id>~<seq>`): the stream modes it was started
    # with (what a rejoin naming none streams).
    stream_modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Runs refused (never run: not LangGraph runs), and per run the seqs of the pauses for
    # approval it was resumed from (each begins a stretch `<run id>~<seq>`).
    rejected: set[str] = field(default_factory=set)
    resumed_from: dict[str, list[int]] = field(default_factory=dict)
    # The node the last update of the idle thread's state was made as (`update_state`'s
    # `as_node`), until a run is asked for: what follows it is next.
    updated_as: str | None = None
    # The checkpoints before this seq are pruned (`thread.history_pruned`): not listed.
    pruned_before: int = 0
    _model_step: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        self.state = ThreadState(tenant_id=self.tenant_id, thread_id=self.thread_id)

    def apply(self, event: RecordedEvent) -> None:
        self.state = self.state.apply(event)
        self.last_seq = event.seq
        self.position = event.position
        self.runs.fold((event,))
        ended = getattr(event.payload, "run_id", None)
        if isinstance(ended, str) and ends_stretch(event, RunRef(ended)):
            self.stretch_ends.setdefault(ended, []).append(event.seq)
        if is_checkpoint(event):
            self.parent_seq = self.checkpoint_seq or None
            self.checkpoint_seq = event.seq
        self.updated_at = event.envelope.ts
        payload = event.payload
        run_of = getattr(payload, "run_id", None) or event.envelope.run_id
        if isinstance(run_of, str):
            ts = event.envelope.ts
            self.run_times[run_of] = (self.run_times.get(run_of, (ts, ts))[0], ts)
        match payload:
            case StateUpdated(as_node=node):
                self.updated_as = node
            case StateRestored(from_seq=from_seq, messages=messages, message_ids=ids):
                # A branch: this checkpoint's parent is the one it was set back to.
                self.parent_seq, self.updated_as, self._model_step = from_seq, None, None
                named = [*ids, *(f"msg-{event.seq}-{i}" for i in range(len(ids), len(messages)))]
                self.messages = [message_dict(m, n) for m, n in zip(messages, named, strict=True)]
            case RequestAccepted(run_id=run_id, strategy=strategy, stream_modes=modes):
                self.updated_as = None
                self.strategies[run_id] = strategy
                if modes:
                    self.stream_modes[run_id] = modes
            case ThreadCreated():
                self.created, self.created_at = payload, event.envelope.ts
            case ThreadMetadataSet(metadata=metadata):
                self.metadata_set = {**self.metadata_set, **metadata}
            case HistoryPruned(before_seq=before_seq):
                self.pruned_before = max(self.pruned_before, before_seq)
            case ModelCompleted(run_id=run_id, step=step):
                self._model_step = (run_id, step)
            case MessageAppended(message=message, run_id=appended_by):
                message_id = f"msg-{event.seq}"
                last = self._model_step
                if message.role == "assistant" and last is not None and last[0] == appended_by:
                    message_id, self._model_step = ai_message_id(*last), None
                self.messages.append(message_dict(message, message_id))
            case HitlInterrupt(run_id=run_id):
                self.interrupt_ids[run_id] = event.envelope.event_id
            case HitlResume(run_id=run_id, stream_modes=modes) if self.pauses.get(run_id):
                paused = self.pauses[run_id][-1]
                self.resumed_from.setdefault(run_id, []).append(paused)
                if modes:
                    self.stream_modes[RunRef(run_id, paused).id] = modes
            case RequestRejected(run_id=run_id):
                self.rejected.add(run_id)
            case RunPaused(run_id=run_id, reason=reason) if reason in STRETCH_PAUSES:
                self.pauses.setdefault(run_id, []).append(event.seq)

    def copy(self) -> GraphView:
        """A view folded as far as this one, sharing nothing that a fold or a caller changes
        (message dicts and the thread state are never changed in place)."""
        twin = copy.copy(self)
        twin.messages = list(self.messages)
        twin.interrupt_ids = dict(self.interrupt_ids)
        twin.pauses = {run: list(seqs) for run, seqs in self.pauses.items()}
        twin.stretch_ends = {run: list(seqs) for run, seqs in self.stretch_ends.items()}
        twin.run_times = dict(self.run_times)
        twin.strategies = dict(self.strategies)
        twin.stream_modes = dict(self.stream_modes)
        twin.rejected = set(self.rejected)
        twin.resumed_from = {run: list(seqs) for run, seqs in self.resumed_from.items()}
        twin.runs = self.runs.copy()
        return twin

    def values(self) -> dict[str, Any]:
        return {
            "messages": list(self.messages),
            "todos": [{"content": t.content, "status": t.status} for t in self.state.todos],
            "files": dict(self.state.files),
        }

    def interrupts(self) -> list[Interrupt]:
        """The interrupt pending now: the active run's tool calls awaiting approval."""
        run = self.state.active_run
        if run is None or not run.hitl_pending:
            return []
        interrupt_id = self.interrupt_ids.get(run.run_id, run.run_id)
        return [Interrupt(value=interrupt_value(run.hitl_pending), id=interrupt_id)]

    def values_with_interrupts(self) -> dict[str, Any]:
        values = self.values()
        pending = self.interrupts()
        if pending:
            values["__interrupt__"] = [{"value": i.value, "id": i.id} for i in pending]
        return values

    def next_node(self) -> str | None:
        """The node the thread stopped before: `tools` while calls await approval, `model`
        at a breakpoint before a model call; on an idle thread whose state was last updated
        as a node, what follows that node (`tools` → `model`; `model` → `tools` while its
        last answer has calls without results, else nothing). None while it runs."""
        run = self.state.active_run
        if run is None:
            if self.state.queue:
                return None
            if self.updated_as == "tools":
                return "model"
            return "tools" if self.updated_as == "model" and self.state.open_tool_calls() else None
        if run.hitl_pending:
            return "tools"
        return "model" if run.at_breakpoint else None

    def status(self) -> ThreadStatus:
        run = self.state.active_run
        if run is not None:
            return "interrupted" if self.next_node() else "busy"
        if self.state.queue:
            return "busy"
        last = self.state.last_run
        return "error" if last is not None and last.status == "error" else "idle"

    def run_status(self, ref: RunRef) -> RunStatus:
        """The LangGraph status of the stretch `ref` of our run."""
        run = self.state.run(ref.run_id)
        if run is None or run.status == "registered":
            return "pending"
        if any(seq > ref.after_seq for seq in self.pauses.get(ref.run_id, ())):
            return "success"  # the stretch ended at a pause: the thread is interrupted
        match run.status:
            case "completed":
                return "success"
            case "error":
                return "error"
            case "canceled":
                return "interrupted"
        return "running"

    def stretches(self) -> list[RunRef]:
        """The LangGraph runs of the thread, oldest first: each run that was not refused,
        then each stretch of it that followed an approval."""
        return [
            ref
            for run in self.state.runs
            if run.run_id not in self.rejected
            for ref in (
                RunRef(run.run_id),
                *(RunRef(run.run_id, seq) for seq in self.resumed_from.get(run.run_id, ())),
            )
        ]

    def stretch_ended(self, ref: RunRef) -> bool:
        """The view holds the event that ended the stretch `ref`."""
        return any(seq > ref.after_seq for seq in self.stretch_ends.get(ref.run_id, ()))

    def run_error(self, ref: RunRef) -> str | None:
        run = self.state.run(ref.run_id)
        return run.error or run.reason or "error" if run and run.status == "error" else None

    def metadata(self) -> dict[str, Any]:
        created = self.created
        if created is None:
            return {}
        return {
            **created.request,
            **self.metadata_set,
            "graph_id": self.state.agent_type or created.agent_type,
            "assistant_id": self.state.agent_type or created.agent_type,
            "agency_id": created.agency_id,
        }


def fold_view(
    tenant: str, thread_id: str, events: list[RecordedEvent], upto_seq: int | None = None
) -> GraphView:
    view = GraphView(tenant_id=tenant, thread_id=thread_id)
    for event in events:
        if upto_seq is not None and event.seq > upto_seq:
            break
        view.apply(event)
    return view
