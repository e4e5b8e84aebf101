"""`checkpoint.saved`: where a run stops, a fingerprint of the thread's state.

The seed's agent saves its state whenever its run stops (paused for a person or its
children, out of steps, ended) and says so with `checkpoint.saved {stateHash, size}`. Here
the log is the state, so nothing else is saved: the event records, in the same append as
the pause or the end, the sha256 of a canonical snapshot of the thread's folded state up to
and including the event before it (`upto_seq`) and the snapshot's size. A replay folds the
log to that seq and compares, which tells whether the current code still folds the log to
the state the runtime had when it wrote the checkpoint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import msgspec
import structlog

from agency.contracts.events import (
    AnyEvent,
    ChatMessage,
    CheckpointSaved,
    RunCanceled,
    RunCompleted,
    RunError,
    RunPaused,
    Todo,
)
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.envelopes import new_envelopes
from agency.infra.jetstream.ports import Append
from agency.infra.jetstream.records import EventContext, RecordedEvent

log = structlog.get_logger(__name__)

# The events at which a run stops: a checkpoint follows them in their append.
STOPS = (RunPaused, RunCompleted, RunError, RunCanceled)


class _Run(msgspec.Struct, frozen=True, array_like=True):
    run_id: str
    status: str
    step: int
    reason: str | None


class _Child(msgspec.Struct, frozen=True, array_like=True):
    reference: str
    status: str


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What the thread's state is, for the fingerprint: the conversation, files, todos,
    runs, queue, children and registered tools, without the thread's id (a fork's copies
    still match), positions or times."""

    agent_type: str
    messages: tuple[ChatMessage, ...]
    files: tuple[tuple[str, str], ...]
    todos: tuple[Todo, ...]
    runs: tuple[_Run, ...]
    active_run_id: str | None
    queue: tuple[str, ...]
    children: tuple[_Child, ...]
    registered_tools: tuple[str, ...]


def snapshot(state: ThreadState) -> bytes:
    return msgspec.json.encode(
        Snapshot(
            agent_type=state.agent_type,
            messages=state.messages,
            files=tuple(sorted(state.files)),
            todos=state.todos,
            runs=tuple(_Run(r.run_id, r.status, r.step, r.reason) for r in state.runs),
            active_run_id=state.active_run_id,
            queue=tuple(q.run_id for q in state.queue),
            children=tuple(_Child(c.reference, c.status) for c in state.children),
            registered_tools=tuple(sorted(state.registered_tools)),
        )
    )


def checkpoint_of(state: ThreadState, run_id: str | None = None) -> CheckpointSaved:
    """The checkpoint of `state` as folded up to its position."""
    data = snapshot(state)
    return CheckpointSaved(
        state_hash="sha256:" + hashlib.sha256(data).hexdigest(),
        size=len(data),
        upto_seq=state.position.seq,
        run_id=run_id,
    )


def simulate(state: ThreadState, events: Sequence[AnyEvent]) -> ThreadState:
    """The state as it will be once `events` are appended after its position (which it
    then has: the last of them)."""
    context = EventContext(correlation_id=state.correlation_id)
    append = Append(state.tenant_id, "thread", state.thread_id, events, state.position, context)
    for envelope in new_envelopes(append):
        state = state.apply(RecordedEvent(envelope=envelope, stream_seq=0, subject=""))
    return state


def with_checkpoint(state: ThreadState, events: Sequence[AnyEvent]) -> list[AnyEvent]:
    """`events` (to append after `state`), followed by a checkpoint of what they leave when
    one of them stops a run. One checkpoint per append, over all of it."""
    stops = [e for e in events if isinstance(e, STOPS)]
    if not stops or any(isinstance(e, CheckpointSaved) for e in events):
        return list(events)
    try:
        saved = checkpoint_of(simulate(state, events), stops[-1].run_id)
    except Exception:
        # A fingerprint never keeps a run from pausing or ending.
        log.exception("checkpoint not computed", thread_id=state.thread_id)
        return list(events)
    return [*events, saved]


def verify(events: Sequence[RecordedEvent]) -> dict[int, bool]:
    """For each `checkpoint.saved` of one thread's events (in order, from its first): the
    seq of the checkpoint → whether the log folded up to `upto_seq` has its hash."""
    if not any(isinstance(e.envelope.payload, CheckpointSaved) for e in events):
        return {}
    first = events[0].envelope
    state = ThreadState(tenant_id=first.tenant_id, thread_id=first.aggregate_id)
    found: dict[int, bool] = {}
    for event in events:
        payload = event.envelope.payload
        if isinstance(payload, CheckpointSaved) and state.position.seq == payload.upto_seq:
            found[event.envelope.seq] = checkpoint_of(state).state_hash == payload.state_hash
        elif isinstance(payload, CheckpointSaved):
            found[event.envelope.seq] = False
        state = state.apply(event)
    return found
