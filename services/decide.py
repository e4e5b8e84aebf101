"""Load an aggregate, decide, append; on a conflict, load again and decide again.

Decisions are pure functions of the aggregate's events; the loop makes them safe with any
number of concurrent writers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from agency.contracts.events import AnyEvent
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import AppendResult, EventContext, RecordedEvent
from agency.infra.retry import RetryPolicy

Decision = Callable[[list[RecordedEvent]], Sequence[AnyEvent]]

CONFLICT_ATTEMPTS = 50
# Losing an append to another writer: decide again after a short, growing, jittered pause
# (the one retry policy's schedule), at most `CONFLICT_ATTEMPTS` times.
CONFLICT_RETRY = RetryPolicy(
    attempts=CONFLICT_ATTEMPTS, timeout=None, wait_initial=0.002, wait_max=0.05,
    wait_jitter=0.01, wait_exp_base=1.5,
)  # fmt: skip


def conflict_pause(attempt: int) -> float:
    """The pause before deciding again after losing the `attempt`-th append (0-based)."""
    return CONFLICT_RETRY.delay(attempt + 1)


class DecisionConflict(Exception):
    def __init__(self, subject: str, attempts: int) -> None:
        super().__init__(f"{subject}: still conflicting after {attempts} attempts")


async def decide_and_append(
    store: AggregateStore,
    tenant_id: str,
    aggregate: Aggregate,
    aggregate_id: str,
    decide: Decision,
    *,
    context: EventContext | None = None,
    idempotency_key: str | None = None,
    attempts: int = CONFLICT_ATTEMPTS,
) -> AppendResult:
    for attempt in range(attempts):
        history, position = await store.read_positioned(tenant_id, aggregate, aggregate_id)
        events = decide(history)
        if not events:
            return AppendResult(position=position, events=())
        try:
            return await store.append(
                tenant_id,
                aggregate,
                aggregate_id,
                events,
                expected=position,
                context=context,
                idempotency_key=idempotency_key,
            )
        except ConcurrencyError:
            await asyncio.sleep(conflict_pause(attempt))
            continue
    raise DecisionConflict(f"{aggregate}/{aggregate_id}", attempts)


def applied(history: list[RecordedEvent], idempotency_key: str) -> bool:
    """Whether a command with this key already left its events in the aggregate."""
    return any(e.envelope.idempotency_key == idempotency_key for e in history)
