"""Waiting for an aggregate's log to hold something, woken by its events as they are stored.

A core NATS subscription to the aggregate's subjects receives every event published there
after it. The log is read once after subscribing and again after each wake-up, from where
the last read ended. A message is only a wake-up: core NATS may drop one under load, so the
log is also read every `RECHECK` seconds, and every wait is bounded by its timeout.

The broker hands a published message to core subscribers as it routes it, and the stream
stores it after its fsync: a read right after a wake-up may find nothing of it yet, while
the wake-ups of every event of the same append have already come. So a read after a wake-up
is followed by another `SETTLE` seconds later, and so on while reads find events, then with
the delay doubling. (Without it an invoke answered by one append waited for the periodic
re-read, 250 ms, in three systems of five: `runs.wait` p50 277 ms against 31.)

Send the command whose events are awaited inside the watch, not before it. The broker hands
a published event to core subscribers when it routes it and stores it in the stream a moment
later (after the fsync): an event routed before the subscription but not yet stored when
the first read asks is in neither, and only the periodic re-read finds it. (Under 16
clients creating threads, one create in ten waited for that re-read when the command was
sent first.) A command sent after the subscription, on the same connection, cannot be
answered before it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from agency.contracts.subjects import Aggregate, event_subject
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import Position, RecordedEvent

T = TypeVar("T")

# The longest a wait goes without reading the log, should a wake-up have been dropped.
RECHECK = 0.25
# The first delay before reading again after a read that followed a wake-up.
SETTLE = 0.005


class LogWatch:
    """One aggregate's log, read from where the last read ended."""

    def __init__(
        self, store: AggregateStore, tenant: str, aggregate: Aggregate, aggregate_id: str
    ) -> None:
        self._store = store
        self._key = (tenant, aggregate, aggregate_id)
        self._woken = asyncio.Event()
        self.position: Position | None = None

    def wake(self) -> None:
        self._woken.set()

    async def read(self) -> list[RecordedEvent]:
        """The events stored since the last read."""
        # Cleared before reading: an event stored during the read wakes the next wait.
        self._woken.clear()
        tenant, aggregate, aggregate_id = self._key
        events, self.position = await self._store.read_positioned(
            tenant, aggregate, aggregate_id, after=self.position
        )
        return events

    async def until(
        self, found: Callable[[list[RecordedEvent]], T | None], timeout: float
    ) -> T | None:
        """Read the log (first at once, then on each wake-up) until `found` answers
        something other than None for the events read; None when `timeout` runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        woken, settle = False, 0.0
        while True:
            events = await self.read()
            answer = found(events)
            if answer is not None:
                return answer
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            # After a wake-up, what woke the watch may not be stored yet: the broker routed
            # it before the stream stored it, and the wake-ups of a whole append may all
            # have come before this read. Read again soon while reads find events, then
            # with the delay doubling up to `RECHECK`.
            if woken or (settle and events):
                settle = SETTLE
            elif settle:
                settle = min(settle * 2, RECHECK)
            woken = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._woken.wait(), timeout=min(remaining, settle or RECHECK)
                )
                woken = True


@contextlib.asynccontextmanager
async def watch_log(
    nc: Client, store: AggregateStore, tenant: str, aggregate: Aggregate, aggregate_id: str
) -> AsyncIterator[LogWatch]:
    """A `LogWatch` woken by the aggregate's events while the block runs; the subscription
    ends with it."""
    watch = LogWatch(store, tenant, aggregate, aggregate_id)

    async def on_event(_: Msg) -> None:
        watch.wake()

    # The server takes a connection's messages in order: the subscription is in place
    # before the first read (sent after it on the same connection) asks for the log.
    subject = (
        store.subject(tenant, aggregate, aggregate_id)
        if isinstance(store, EventStore)
        else event_subject(tenant, aggregate, aggregate_id)
    )
    sub = await nc.subscribe(subject, cb=on_event)
    try:
        yield watch
    finally:
        with contextlib.suppress(NatsError, TimeoutError):
            await sub.unsubscribe()
