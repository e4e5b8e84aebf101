"""Appending a thread's events after the position they were decided on.

Every append of the runtime's drives goes through here: it expects the position of the
state it was decided on, so a thread another writer moved meanwhile is a conflict, and the
caller decides again on the state read back. A command's decision among the events goes
under the command's idempotency key and as caused by it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from agency.contracts.events import AnyEvent
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import EventContext
from agency.services.runtime.checkpoint import with_checkpoint
from agency.services.runtime.decision import Decision
from agency.services.threads.caches import ThreadCache


def thread_context(state: ThreadState, causation_id: str | None) -> EventContext:
    """The context of the events appended to the thread of `state`: caused by a command
    (`causation_id`) or by nothing outside the thread."""
    return EventContext(
        agency_id=state.agency_id,
        thread_id=state.thread_id,
        correlation_id=state.correlation_id,
        causation_id=causation_id,
    )


class ThreadAppends:
    """Appends to threads, counted per thread while a drive is `watched`."""

    def __init__(self, store: AggregateStore, threads: ThreadCache) -> None:
        self._store = store
        self._threads = threads
        # Appends made by the drives being watched, per thread.
        self._appends: dict[tuple[str, str], int] = {}

    @contextlib.contextmanager
    def watched(self, tenant_id: str, thread_id: str) -> Iterator[Callable[[], int]]:
        """Count this thread's appends while the block runs; yields how many so far."""
        key = (tenant_id, thread_id)
        self._appends[key] = 0
        try:
            yield lambda: self._appends.get(key, 0)
        finally:
            self._appends.pop(key, None)

    async def append(
        self, state: ThreadState, events: Sequence[AnyEvent], decision: Decision | None = None
    ) -> tuple[ThreadState, bool]:
        """Append after the state's position. On a conflict, the reloaded state and False:
        the caller decides again from what the other writer left. An append the broker had
        already stored (a retried publish) is in the log: the reloaded state and True.
        With a command's `decision` among `events`, under its key and as caused by it."""
        landed, appended = await self._append(state, events, decision)
        if decision is not None:
            if appended:
                decision.landed(landed)
            else:
                decision.missed()
        return landed, appended

    async def _append(
        self, state: ThreadState, events: Sequence[AnyEvent], decision: Decision | None
    ) -> tuple[ThreadState, bool]:
        try:
            result = await self._store.append(
                state.tenant_id,
                "thread",
                state.thread_id,
                with_checkpoint(state, events),
                expected=state.position,
                context=thread_context(
                    state, decision.causation_id if decision is not None else None
                ),
                idempotency_key=decision.idempotency_key if decision is not None else None,
                keyed=len(decision.events) if decision is not None else None,
            )
        except ConcurrencyError:
            return await self._threads.load(state.tenant_id, state.thread_id), False
        if result.duplicate:
            # Stored before. With a command's decision, what was stored under its key may
            # be that decision alone, without what this append adds to it: read, and
            # decided again from there (the command, on its side, finds its key decided).
            reloaded = await self._threads.load(state.tenant_id, state.thread_id)
            return reloaded, decision is None
        key = (state.tenant_id, state.thread_id)
        if key in self._appends:
            self._appends[key] += 1
        return self._threads.advance(state, result.events), True
