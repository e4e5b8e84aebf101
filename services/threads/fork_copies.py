"""The copies of one thread's history that a fork writes (`fork.py`), and the events that
close the copy at a consistent point: each copied event names its original, every forked
thread's id is replaced by its fork's, and what was under way at the cut ends canceled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from agency.contracts.events import (
    AnyEvent,
    BlueprintSwitched,
    ParentRef,
    RunCanceled,
    SubagentCompleted,
    SubagentSpawned,
    ThreadCreated,
    ToolError,
    ToolRequested,
)
from agency.domain.run_cancel import canceled
from agency.domain.thread_state import ThreadState, fold
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.jetstream.streams import ATOMIC_BATCH_LIMIT

FORKED_MID_RUN = "forked mid-run"

_encoder = msgspec.json.Encoder()
_payload_decoder: msgspec.json.Decoder[AnyEvent] = msgspec.json.Decoder(AnyEvent)


@dataclass(frozen=True, slots=True)
class Copy:
    payload: AnyEvent
    causation_id: str
    idempotency_key: str | None = None


def plan_copies(
    tenant_id: str,
    prefix: Sequence[RecordedEvent],
    ids: dict[str, str],
    *,
    new_parent: str | None,
    agent_type: str | None,
) -> tuple[list[Copy], list[Copy], tuple[str, ...]]:
    """The copies of `prefix`, and the events that close it at a consistent point."""
    first = prefix[0]
    created = first.payload
    assert isinstance(created, ThreadCreated)
    parent = created.parent
    request = {
        **created.request,
        "forkedFrom": first.envelope.aggregate_id,
        "forkedAtSeq": str(prefix[-1].seq),
    }
    fresh = ThreadCreated(
        agency_id=created.agency_id,
        agent_type=created.agent_type,
        parent=ParentRef(
            thread_id=new_parent,
            token=parent.token,
            tool_call_id=parent.tool_call_id,
            communication=parent.communication,
        )
        if parent is not None and new_parent is not None
        else None,
        request=request,
        blueprint=created.blueprint,
    )
    copies = [
        Copy(fresh, first.envelope.event_id, _relink_text(first.envelope.idempotency_key, ids))
    ]
    copies.extend(
        Copy(
            _relink(e.envelope.payload, ids),
            e.envelope.event_id,
            _relink_text(e.envelope.idempotency_key, ids),
        )
        for e in prefix[1:]
    )
    state = fold(tenant_id, first.envelope.aggregate_id, list(prefix))
    closing_events, runs = _closing(state, prefix, ids)
    if agent_type is not None and agent_type != state.agent_type:
        closing_events.append(
            BlueprintSwitched(
                from_agent_type=state.agent_type, to_agent_type=agent_type, reason="fork"
            )
        )
    cause = prefix[-1].envelope.event_id
    return copies, [Copy(p, cause) for p in closing_events], runs


def _relink(payload: AnyEvent, ids: dict[str, str]) -> AnyEvent:
    """The payload with every forked thread's id replaced by its fork's id.

    Subagent events name the forked children, and so do texts the model saw ("Subagent
    started (reference: <child>)"), so a later call naming a child by that reference
    reaches the fork's child, never the original. Thread ids are unique tokens, so the
    replacement touches nothing else.
    """
    data = _encoder.encode(payload)
    if not any(old.encode() in data for old in ids):
        return payload
    for old, new in ids.items():
        data = data.replace(old.encode(), new.encode())
    relinked: AnyEvent = _payload_decoder.decode(data)
    return relinked


def _relink_text(text: str | None, ids: dict[str, str]) -> str | None:
    if text is None:
        return None
    for old, new in ids.items():
        text = text.replace(old, new)
    return text


def _closing(
    state: ThreadState, prefix: Sequence[RecordedEvent], ids: dict[str, str]
) -> tuple[list[AnyEvent], tuple[str, ...]]:
    requests = {
        e.payload.call.id: e.payload for e in prefix if isinstance(e.payload, ToolRequested)
    }
    events: list[AnyEvent] = [
        ToolError(
            run_id=request.run_id,
            tool_call_id=call_id,
            tool_name=request.call.name,
            error=f"not run: {FORKED_MID_RUN}",
        )
        for call_id, request in requests.items()
        if state.outcome(call_id) is None
    ]
    # A child still working at the cut is forked canceled; its call is answered so.
    events.extend(
        SubagentCompleted(
            run_id=e.payload.run_id,
            tool_call_id=e.payload.tool_call_id,
            child_thread_id=ids.get(e.payload.child_thread_id, e.payload.child_thread_id),
            outcome="canceled",
            report=FORKED_MID_RUN,
        )
        for e in prefix
        if isinstance(e.payload, SubagentSpawned) and state.outcome(e.payload.tool_call_id) is None
    )
    runs: list[str] = []
    active = state.active_run
    if active is not None:
        events.extend(canceled(state, active.run_id, FORKED_MID_RUN))
        runs.append(active.run_id)
    # Accepted requests not started yet would start on their own in the fork; a run asked
    # for later (`run.delayed`) is the original's: its invoke never reaches the fork.
    waiting = [q.run_id for q in state.queue] + [r.run_id for r in state.delayed()]
    for run_id in waiting:
        if run_id not in runs:
            events.append(RunCanceled(run_id=run_id, reason=FORKED_MID_RUN))
            runs.append(run_id)
    return events, tuple(runs)


def _quiet(state: ThreadState) -> bool:
    """Nothing would happen on its own here: no run, no queue, no call awaiting a result."""
    return (
        state.active_run is None
        and not state.queue
        and not state.delayed()
        and all(state.outcome(call_id) is not None for call_id in state.requested)
    )


def chunk_copies(
    tenant_id: str, prefix: Sequence[RecordedEvent], copies: list[Copy], closing: list[Copy]
) -> list[list[Copy]]:
    everything = copies + closing
    if len(everything) <= ATOMIC_BATCH_LIMIT:
        return [everything]
    # quiet[i]: the thread was quiet after its first i events.
    state = ThreadState(tenant_id=tenant_id, thread_id=prefix[0].envelope.aggregate_id)
    quiet = [False]
    for event in prefix:
        state = state.apply(event)
        quiet.append(_quiet(state))
    chunks: list[list[Copy]] = []
    start = 0
    while len(everything) - start > ATOMIC_BATCH_LIMIT:
        limit = start + ATOMIC_BATCH_LIMIT
        cut = next((i for i in range(min(limit, len(copies)), start, -1) if quiet[i]), limit)
        chunks.append(everything[start:cut])
        start = cut
    chunks.append(everything[start:])
    return chunks
