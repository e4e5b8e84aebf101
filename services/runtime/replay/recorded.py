"""What a recorded thread gives a re-execution: its outside inputs and its model answers.

The log holds two kinds of events per thread. The runtime's `ThreadDriver` produces some
(runs, steps, model calls, messages, requested and state-tool calls); everything else
came from outside the runtime (the registry's `thread.created`, accepted and rejected
requests, cancels, human decisions, external tool results, the subagents coordinator, a
fork's copies). Outside writers always stamp their events with the idempotency key of the
command or call they apply, or with the event they follow from (`causation_id`); the
driver's appends carry neither. That provenance, plus the types only outsiders write,
decides which is which.

`RecordedProvider` answers the k-th model call of a run with the k-th recorded call of
that run: its `model.completed`, its model error, or (a call the record abandoned: a
cancel, a lost append race, a killed worker) an abort, so the driver decides again exactly
as the live runtime did.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, get_args

from agency.contracts.events import (
    TOOL_RESULT_TYPES,
    AgentError,
    ModelCompleted,
    ModelStarted,
    RunError,
    ToolRequested,
)
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.errors import ModelErrorKind
from agency.services.llm.provider import (
    ModelError,
    ModelRequest,
    ModelResponse,
    OnDelta,
    recorded_response,
)

DELTA = "model.delta"
# Streamed text, left out of comparisons: how it was cut into events depends on timing.
STREAMED: frozenset[str] = frozenset({DELTA, "reply.delta"})
# Types only a writer outside the runtime appends, whatever their envelope says.
GIVEN_TYPES: frozenset[str] = frozenset(
    {
        "thread.created",
        "request.accepted",
        "request.rejected",
        "hitl.resume",
        "subagent.spawned",
        "subagent.completed",
    }
)
_TOOL_EVENTS = TOOL_RESULT_TYPES | {"tool.started"}


class ReplayStop(Exception):
    """The re-execution of a thread cannot go on; the comparison covers what it produced."""


class BeyondRecord(ReplayStop):
    def __init__(self, thread_id: str, run_id: str, call: int, recorded: int) -> None:
        super().__init__(
            f"thread {thread_id}: run {run_id} made model call {call}, but the record has "
            f"{recorded} for that run"
        )


class RecordEnds(ReplayStop):
    def __init__(self, thread_id: str, run_id: str, call: int) -> None:
        super().__init__(
            f"thread {thread_id}: the record ends while model call {call} of run {run_id} "
            "was in flight"
        )


@dataclass(frozen=True, slots=True)
class InputGroup:
    """Consecutive outside events, and how many produced events the record had before them."""

    trigger: int
    events: tuple[RecordedEvent, ...]

    @property
    def first_stream_seq(self) -> int:
        return self.events[0].stream_seq

    @property
    def last_stream_seq(self) -> int:
        return self.events[-1].stream_seq


@dataclass(frozen=True, slots=True)
class RecordedCall:
    started: RecordedEvent
    completed: ModelCompleted | None = None
    error: AgentError | None = None


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    tenant_id: str
    thread_id: str
    events: tuple[RecordedEvent, ...]
    inputs: tuple[InputGroup, ...]
    # Produced events the comparison looks at (streamed deltas left out).
    produced: tuple[RecordedEvent, ...]
    calls: dict[str, tuple[RecordedCall, ...]] = field(default_factory=dict)

    def has_events_after(self, stream_seq: int) -> bool:
        return bool(self.events) and self.events[-1].stream_seq > stream_seq


def is_produced(event: RecordedEvent, requested: set[str]) -> bool:
    """Whether the runtime's driver appended this event (see the module docstring)."""
    env = event.envelope
    if env.type in GIVEN_TYPES or env.causation_id is not None:
        return False
    if env.idempotency_key is not None:
        return False
    # The tools service runs only requested calls; results of other calls (state tools,
    # unknown tools) are the runtime's own.
    call_id = getattr(env.payload, "tool_call_id", None)
    return not (env.type in _TOOL_EVENTS and call_id in requested)


def split_record(tenant_id: str, thread_id: str, events: Sequence[RecordedEvent]) -> ThreadRecord:
    requested: set[str] = set()
    groups: list[InputGroup] = []
    pending: list[RecordedEvent] = []
    produced: list[RecordedEvent] = []
    for event in events:
        if isinstance(event.payload, ToolRequested):
            requested.add(event.payload.call.id)
        if not is_produced(event, requested):
            pending.append(event)
            continue
        if event.type in STREAMED:
            continue
        if pending:
            groups.append(InputGroup(trigger=len(produced), events=tuple(pending)))
            pending = []
        produced.append(event)
    if pending:
        groups.append(InputGroup(trigger=len(produced), events=tuple(pending)))
    return ThreadRecord(
        tenant_id=tenant_id,
        thread_id=thread_id,
        events=tuple(events),
        inputs=tuple(groups),
        produced=tuple(produced),
        calls=_calls(produced),
    )


def _calls(produced: Sequence[RecordedEvent]) -> dict[str, tuple[RecordedCall, ...]]:
    calls: dict[str, list[RecordedCall]] = {}
    for event in produced:
        match event.payload:
            case ModelStarted(run_id=run_id):
                calls.setdefault(run_id, []).append(RecordedCall(started=event))
            case ModelCompleted(run_id=run_id) as completed:
                _settle(calls.get(run_id), completed=completed)
            case AgentError(run_id=run_id) as error:
                _settle(calls.get(run_id), error=error)
    return {run_id: tuple(made) for run_id, made in calls.items()}


def _settle(
    made: list[RecordedCall] | None,
    *,
    completed: ModelCompleted | None = None,
    error: AgentError | None = None,
) -> None:
    if not made or made[-1].completed is not None or made[-1].error is not None:
        return
    last = made[-1]
    made[-1] = RecordedCall(started=last.started, completed=completed, error=error)


class Feed(Protocol):
    """The re-execution of one thread, as the recorded provider sees it."""

    def model_run(self) -> str:
        """The run whose model call is being made (its latest produced `model.started`)."""
        ...

    def inject_due(self) -> bool:
        """Let recorded outside events due by now land; whether any did."""
        ...


class RecordedProvider:
    """A `Provider` answering from the record; it never calls a model."""

    def __init__(self, record: ThreadRecord, feed: Feed) -> None:
        self._record = record
        self._feed = feed
        self._made: Counter[str] = Counter()

    async def complete(
        self, request: ModelRequest, on_delta: OnDelta | None = None
    ) -> ModelResponse:
        run_id = self._feed.model_run()
        index = self._made[run_id]
        self._made[run_id] += 1
        recorded = self._record.calls.get(run_id, ())
        if index >= len(recorded):
            raise BeyondRecord(self._record.thread_id, run_id, index + 1, len(recorded))
        call = recorded[index]
        landed = self._feed.inject_due()
        if call.completed is None and call.error is None:
            if not landed and not self._record.has_events_after(call.started.stream_seq):
                raise RecordEnds(self._record.thread_id, run_id, index + 1)
            # Abandoned in the record: abort the call as a cancel would, and let the driver
            # decide again from what the log holds now.
            raise asyncio.CancelledError
        if landed and on_delta is not None:
            # Live, the runtime saw outside events mid-call through its delta appends losing
            # the race and reloading; one delta append reproduces that (and aborts the call
            # if the run stopped meanwhile).
            await on_delta(call.completed.message.content if call.completed else "")
        if call.error is not None:
            # The recorded run.error of this run keeps the failure's kind.
            kind = next(
                (
                    e.payload.kind
                    for e in self._record.events
                    if e.stream_seq > call.started.stream_seq
                    and isinstance(e.payload, RunError)
                    and e.payload.run_id == run_id
                ),
                "model_error",
            )
            raise ModelError(
                call.error.error,
                retryable=call.error.retryable,
                kind=kind if kind in get_args(ModelErrorKind) else "model_error",  # type: ignore[arg-type]
            )
        assert call.completed is not None
        return recorded_response(call.completed)
