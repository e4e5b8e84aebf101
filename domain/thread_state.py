"""A thread's state as a fold of its events: the runtime keeps no other state.

`ThreadState.apply` takes one recorded event and returns the next state; nothing here does
I/O, so a replay of the log rebuilds exactly what the runtime saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Literal

from agency.contracts.events import (
    AgentStarted,
    AnyEvent,
    BlueprintSpec,
    BlueprintSwitched,
    ChatMessage,
    FileWritten,
    HitlInterrupt,
    HitlResume,
    MessageAppended,
    ParentRef,
    RequestAccepted,
    RequestInjected,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunDelayed,
    RunError,
    RunPaused,
    RunResumed,
    RunStarted,
    RunTick,
    SessionTurn,
    StateRestored,
    SubagentCompleted,
    SubagentRequested,
    ThreadCreated,
    ThreadDeleted,
    ThreadTerminated,
    Todo,
    TodosWritten,
    ToolCall,
    ToolRegistered,
)
from agency.contracts.records import Position, RecordedEvent
from agency.domain.thread_children import SUBAGENT_EVENTS, ChildEntry, child_changes
from agency.domain.thread_content import CONTENT_EVENTS, content_changes
from agency.domain.thread_parts import (
    QueuedRequest as QueuedRequest,
    RunView as RunView,
    ToolOutcome,
    joined_tools,
)


@dataclass(frozen=True, slots=True)
class ThreadState:
    tenant_id: str
    thread_id: str
    exists: bool = False
    agency_id: str = ""
    agent_type: str = ""
    parent: ParentRef | None = None
    correlation_id: str | None = None
    created_at: datetime | None = None
    # When the thread last changed: the watchdog's measure of progress.
    last_event_at: datetime | None = None
    position: Position = field(default_factory=Position)
    messages: tuple[ChatMessage, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    # (tool, path) of each call answered without an error whose arguments name a `path`.
    tool_paths: frozenset[tuple[str, str]] = frozenset()
    todos: tuple[Todo, ...] = ()
    runs: tuple[RunView, ...] = ()
    active_run_id: str | None = None
    queue: tuple[QueuedRequest, ...] = ()
    keys: tuple[tuple[str, str], ...] = ()
    # Idempotency keys of the approve and cancel commands decided (their events carry them).
    command_keys: frozenset[str] = frozenset()
    requested: frozenset[str] = frozenset()
    outcomes: tuple[tuple[str, ToolOutcome], ...] = ()
    model: str = ""
    # Subagents: what this thread asked for, and the children it has.
    spawn_requests: tuple[SubagentRequested, ...] = ()
    children: tuple[ChildEntry, ...] = ()
    # Every report a child made (`subagent.completed`), in order.
    reports: tuple[SubagentCompleted, ...] = ()
    # Tools middleware registered for this thread (`tool.registered`), by name.
    registered_tools: dict[str, ToolRegistered] = field(default_factory=dict)
    # A dual-AI session: the side holding the floor, the turn number, its model calls so far.
    side: Literal["A", "B"] | None = None
    session_turn: int = 0
    side_steps: int = 0
    # The agent's prompt became active (the thread's first run, a handoff) and has made no
    # model step yet: its immediate subagents are due.
    prompt_activated: bool = False
    ever_started: bool = False
    # A subagent's scoped variables (`scopedEnv`), sealed as its `thread.created` holds them.
    sealed_env: str = ""
    # The blueprint its parent's subagent entry defines inline (`thread.created`).
    blueprint: BlueprintSpec | None = None
    # Sealed values provided for this thread's subagents, in order.
    provided_sealed: tuple[str, ...] = ()
    # Shut down by `terminate`: no run starts and no message joins any more.
    terminated: bool = False
    terminated_reason: str = ""
    # Deleted (`thread.deleted`): its content erased; reads answer 410 (docs/data.md).
    deleted: bool = False
    # A code agent's state (`agent.state_set`): the last value set, None before any.
    agent_state: Any = None

    # --- queries ------------------------------------------------------------------

    @property
    def inline_blueprint(self) -> BlueprintSpec | None:
        """The inline blueprint the thread was created with, while it is the active agent
        (a handoff to another agent type leaves it, a handoff back returns to it)."""
        if self.blueprint is not None and self.blueprint.name == self.agent_type:
            return self.blueprint
        return None

    @property
    def active_run(self) -> RunView | None:
        return self.run(self.active_run_id) if self.active_run_id else None

    @property
    def last_run(self) -> RunView | None:
        return self.runs[-1] if self.runs else None

    def run(self, run_id: str) -> RunView | None:
        return next((view for view in reversed(self.runs) if view.run_id == run_id), None)

    def run_for_key(self, key: str) -> str | None:
        return next((run_id for k, run_id in self.keys if k == key), None)

    def file(self, path: str) -> str | None:
        return next((content for p, content in self.files if p == path), None)

    @property
    def file_map(self) -> dict[str, str]:
        return dict(self.files)

    def outcome(self, call_id: str) -> ToolOutcome | None:
        return next((outcome for cid, outcome in self.outcomes if cid == call_id), None)

    def answered_call_ids(self) -> frozenset[str]:
        return frozenset(
            m.tool_call_id for m in self.messages if m.role == "tool" and m.tool_call_id
        )

    def open_tool_calls(self) -> tuple[ToolCall, ...]:
        """Calls of the last assistant message that have no tool message yet."""
        for message in reversed(self.messages):
            if message.role == "assistant":
                answered = self.answered_call_ids()
                return tuple(c for c in message.tool_calls if c.id not in answered)
        return ()

    def child(self, reference: str) -> ChildEntry | None:
        return next((e for e in self.children if e.reference == reference), None)

    def report_for_call(self, call_id: str) -> SubagentCompleted | None:
        return next((r for r in self.reports if r.tool_call_id == call_id), None)

    def last_report_of(self, child: str) -> SubagentCompleted | None:
        return next((r for r in reversed(self.reports) if r.child_thread_id == child), None)

    def queued(self, run_id: str) -> QueuedRequest | None:
        return next((q for q in self.queue if q.run_id == run_id), None)

    def delayed(self) -> tuple[RunView, ...]:
        """The runs asked for to start later (`run.delayed`) that are still to start."""
        return tuple(r for r in self.runs if r.delayed and not r.terminal)

    def last_assistant(self) -> ChatMessage | None:
        return next((m for m in reversed(self.messages) if m.role == "assistant"), None)

    # --- the fold -----------------------------------------------------------------

    def apply(self, event: RecordedEvent) -> ThreadState:
        """The state after `event`; this one is left as it is."""
        env = event.envelope
        state = self._apply_payload(env.payload, event)
        if state is self:
            state = _evolve(self)
        # `state` is new here and nobody holds it yet: stamped in place rather than copied
        # once more (the payload's changes never read what is stamped).
        _set(state, "position", event.position)
        _set(state, "last_event_at", env.ts)
        if env.idempotency_key and (
            isinstance(env.payload, RunCanceled | HitlResume | ThreadTerminated | StateRestored)
            # what a request set on an idle thread (`runtime.update_state`)
            or (
                isinstance(env.payload, MessageAppended | FileWritten | TodosWritten)
                and env.payload.run_id is None
            )
        ):
            _set(state, "command_keys", state.command_keys | {env.idempotency_key})
        return state

    def _with_run(self, run_id: str, **changes: object) -> ThreadState:
        runs = tuple(replace(r, **changes) if r.run_id == run_id else r for r in self.runs)  # type: ignore[arg-type]
        return _evolve(self, runs=runs)

    def _apply_payload(self, payload: AnyEvent, event: RecordedEvent) -> ThreadState:
        if isinstance(payload, SUBAGENT_EVENTS):
            return _evolve(self, **child_changes(self, payload, event.envelope.ts))
        if isinstance(payload, CONTENT_EVENTS):
            return _evolve(self, **content_changes(self, payload))
        match payload:
            case ThreadCreated(agency_id=agency_id, agent_type=agent_type, parent=parent):
                return _evolve(
                    self,
                    sealed_env=payload.sealed_env,
                    blueprint=payload.blueprint,
                    exists=True,
                    agency_id=agency_id,
                    agent_type=agent_type,
                    parent=parent,
                    correlation_id=event.envelope.correlation_id or self.thread_id,
                    created_at=event.envelope.ts,
                )
            case RequestAccepted(
                run_id=run_id, idempotency_key=key, messages=msgs, files=files, strategy=strategy
            ):
                queued = QueuedRequest(
                    run_id,
                    key,
                    msgs,
                    tuple(files.items()),
                    strategy,
                    payload.reported_by,
                    payload.agent_type,
                )
                return _evolve(
                    self,
                    keys=(*self.keys, (key, run_id)),
                    queue=(*self.queue, queued),
                    runs=(
                        *self._without_delayed(run_id),
                        RunView(
                            run_id=run_id,
                            pause_before_tools=payload.pause_before_tools,
                            pause_before_model=payload.pause_before_model,
                            pause_after_tools=payload.pause_after_tools,
                            client_tools=payload.client_tools,
                        ),
                    ),
                )
            case RequestInjected(run_id=host, request_run_id=request_run_id):
                state = self._with_run(request_run_id, status="injected", reason=host)
                joining, joined = self.run(request_run_id), self.run(host)
                if joining is not None and joined is not None:
                    # What the request asked for holds for the run it joined, from here on.
                    state = state._with_run(
                        host,
                        pause_before_tools=joined.pause_before_tools or joining.pause_before_tools,
                        pause_before_model=joined.pause_before_model or joining.pause_before_model,
                        pause_after_tools=joined.pause_after_tools or joining.pause_after_tools,
                        client_tools=joined_tools(joined.client_tools, joining.client_tools),
                    )
                return _evolve(
                    state, queue=tuple(q for q in state.queue if q.run_id != request_run_id)
                )
            case RequestRejected(run_id=run_id, idempotency_key=key, reason=reason):
                return _evolve(
                    self,
                    keys=(*self.keys, (key, run_id)),
                    runs=(
                        *self._without_delayed(run_id),
                        RunView(run_id=run_id, status="error", error=reason),
                    ),
                )
            case RunStarted(run_id=run_id, agent_type=agent_type, max_steps=max_steps):
                state = _evolve(
                    self,
                    active_run_id=run_id,
                    queue=tuple(q for q in self.queue if q.run_id != run_id),
                    side=None,
                    session_turn=0,
                    side_steps=0,
                    ever_started=True,
                    prompt_activated=self.prompt_activated or not self.ever_started,
                )
                if state.run(run_id) is None:
                    state = _evolve(state, runs=(*state.runs, RunView(run_id=run_id)))
                return state._with_run(
                    run_id, status="running", agent_type=agent_type, max_steps=max_steps,
                    started=True,
                )  # fmt: skip
            case AgentStarted(model=model):
                return _evolve(self, model=model)
            case RunTick(run_id=run_id, step=step):
                state = _evolve(self._with_run(run_id, step=step), prompt_activated=False)
                return _evolve(state, side_steps=state.side_steps + 1) if state.side else state
            case SessionTurn(side=side, turn=turn):
                return _evolve(self, side=side, session_turn=turn, side_steps=0)
            case RunPaused(run_id=run_id, reason=reason):
                return self._with_run(run_id, status="paused", reason=reason)
            case RunResumed(run_id=run_id, max_steps=max_steps):
                if max_steps:
                    return self._with_run(
                        run_id, status="running", reason=None, max_steps=max_steps
                    )
                return self._with_run(run_id, status="running", reason=None)
            case RunCompleted(run_id=run_id, result=result):
                return self._finish(run_id, status="completed", result=result)
            case RunError(run_id=run_id, error=error, kind=kind):
                return self._finish(run_id, status="error", error=error, reason=kind)
            case RunDelayed(run_id=run_id) if self.run(run_id) is None:
                return _evolve(self, runs=(*self.runs, RunView(run_id=run_id, delayed=True)))
            case RunCanceled(run_id=run_id, reason=reason):
                return self._finish(run_id, status="canceled", reason=reason or "canceled")
            case MessageAppended(message=message, run_id=run_id):
                activated = self.prompt_activated and message.role != "assistant"
                state = _evolve(
                    self, messages=(*self.messages, message), prompt_activated=activated
                )
                held = self.run(run_id) if run_id is not None else None
                if held is not None and held.held_messages[:1] == (message,):
                    return state._with_run(held.run_id, held_messages=held.held_messages[1:])
                return state
            case HitlInterrupt(run_id=run_id, proposed_tool_calls=calls):
                return self._with_run(run_id, hitl_pending=calls)
            case HitlResume(
                run_id=run_id, approved=approved, modified_tool_calls=modified, messages=held
            ):
                view = self.run(run_id)
                if view is not None and view.at_breakpoint:
                    # The model call the run paused before goes ahead.
                    return self._with_run(
                        run_id, breakpoint_passed=view.step + 1, held_messages=held
                    )
                pending = view.hitl_pending if view else ()
                if not approved:
                    return self._with_run(
                        run_id,
                        hitl_pending=(),
                        hitl_rejected=frozenset(c.id for c in pending),
                        held_messages=held,
                    )
                overrides = tuple((c.id, c) for c in modified or ())
                return self._with_run(
                    run_id, hitl_pending=(), hitl_overrides=overrides, held_messages=held
                )
            case BlueprintSwitched(to_agent_type=to_agent_type):
                return _evolve(self, agent_type=to_agent_type, prompt_activated=True)
            case ThreadTerminated(reason=reason):
                return _evolve(self, terminated=True, terminated_reason=reason, queue=())
            case ThreadDeleted():
                # Its content is erased: no run starts on it again.
                return _evolve(
                    self, terminated=True, terminated_reason="deleted", deleted=True, queue=()
                )
        return self

    def _without_delayed(self, run_id: str) -> tuple[RunView, ...]:
        """The runs, but `run_id` while it waits to be asked for (`run.delayed`): its
        request replaces it."""
        return tuple(r for r in self.runs if not (r.run_id == run_id and r.delayed))

    def _finish(self, run_id: str, **changes: object) -> ThreadState:
        state = self._with_run(run_id, hitl_pending=(), **changes)
        if state.active_run_id == run_id:
            state = _evolve(state, active_run_id=None)
        return _evolve(state, queue=tuple(q for q in state.queue if q.run_id != run_id))


# The fold makes a new state for every event, and `dataclasses.replace` walks the class's
# fields and calls `__init__` for each: a third of a fold's time on its own. A state has
# no `__post_init__` and no field outside `__init__`, so setting the slots directly builds
# the same object at half the cost (tests/runtime/test_state_evolve.py compares the two).
_STATE_FIELDS = tuple(f.name for f in fields(ThreadState))
_STATE_FIELD_SET = frozenset(_STATE_FIELDS)
_new = object.__new__
_set = object.__setattr__


def _evolve(state: ThreadState, **changes: Any) -> ThreadState:
    """`dataclasses.replace(state, **changes)`, faster."""
    if not _STATE_FIELD_SET.issuperset(changes):
        raise TypeError(f"ThreadState has no field {sorted(set(changes) - _STATE_FIELD_SET)}")
    new = _new(ThreadState)
    for name in _STATE_FIELDS:
        _set(new, name, changes[name] if name in changes else getattr(state, name))
    return new


def fold(tenant_id: str, thread_id: str, events: list[RecordedEvent]) -> ThreadState:
    state = ThreadState(tenant_id=tenant_id, thread_id=thread_id)
    for event in events:
        state = state.apply(event)
    return state
