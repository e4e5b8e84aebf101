"""`threads.prune(strategy="keep_latest")`: a thread keeps its latest checkpoint, its past
ones are dropped from what LangGraph reads.

The log is append-only: nothing of it is removed. A `thread.history_pruned` on the
thread's log, naming its latest checkpoint then (`before_seq`), marks the checkpoints
before it as gone: `threads.get_history` lists none of them, and reading the state at
one, running from one or forking at one (`state.fork`) is 404. The thread's state, its
runs and its own events (Agency's `/events`, replays) are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from litestar.exceptions import NotFoundException

from agency.contracts.events import AnyEvent, HistoryPruned
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView, is_checkpoint
from agency.services.decide import decide_and_append


def pruned_before(events: Sequence[RecordedEvent]) -> int:
    """The seq before which the thread's checkpoints are pruned (0: none is)."""
    marks = (e.payload.before_seq for e in events if isinstance(e.payload, HistoryPruned))
    return max(marks, default=0)


def refuse_pruned(thread_id: str, seq: int, oldest: int) -> None:
    """404 for a checkpoint `seq` the thread's history no longer holds (it holds those from
    `oldest` on)."""
    if seq < oldest:
        raise NotFoundException(
            f"checkpoint {seq} of thread {thread_id} was pruned (threads.prune keep_latest): "
            f"its oldest checkpoint is {oldest}"
        )


def keep_latest(history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    """Prune the checkpoints before the latest one; nothing when none is left to prune."""
    latest = max((e.seq for e in history if is_checkpoint(e)), default=0)
    if latest <= pruned_before(history):
        return ()
    return (HistoryPruned(before_seq=latest),)


async def prune_history(deps: ApiDeps, tenant: str, view: GraphView) -> None:
    """Append the thread's `thread.history_pruned` (decided on its log as it is then)."""
    if view.created is None:
        return  # awaiting its first run: no checkpoint yet
    root = view.created.parent is None
    context = EventContext(
        agency_id=view.created.agency_id,
        thread_id=view.thread_id,
        correlation_id=view.thread_id if root else None,
    )
    await decide_and_append(
        deps.bus.store, tenant, "thread", view.thread_id, keep_latest, context=context
    )
