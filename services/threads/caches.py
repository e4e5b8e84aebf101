"""Folded thread state and agency blueprints, cached by position.

A thread is read from the log once; later loads fetch only the events after the cached
position (a direct get from the per-subject index), so a step costs one small read instead
of a full reload.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from dataclasses import replace

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from agency.contracts.events import BlueprintDeleted, BlueprintSaved, BlueprintSpec
from agency.contracts.partitions import aggregate_of, live_filters
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.decoding import event_type_of
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import Position, RecordedEvent

_BLUEPRINT_CHANGES = frozenset({"blueprint.saved", "blueprint.deleted", None})


class ThreadCache:
    """The threads last used, folded. A thread at rest (no run, or its run parked on a
    person's approval or ended) waits for someone: it is kept among the `resting` last such
    threads only, so that thousands of parked threads do not stay folded in memory. Loaded
    again, it is read back from the log."""

    def __init__(self, store: AggregateStore, capacity: int = 10_000, resting: int = 500) -> None:
        self._store = store
        self._capacity = capacity
        self._resting_capacity = min(resting, capacity)
        self._states: OrderedDict[tuple[str, str], ThreadState] = OrderedDict()
        self._resting: OrderedDict[tuple[str, str], ThreadState] = OrderedDict()

    async def load(
        self, tenant_id: str, thread_id: str, *, from_leader: bool = False
    ) -> ThreadState:
        """The thread as the log has it; `from_leader` reads what is new from the stream's
        leader, never from a replica that may lag (see `EventStore.read_positioned`)."""
        key = (tenant_id, thread_id)
        state = self._get(key) or ThreadState(tenant_id=tenant_id, thread_id=thread_id)
        newer, position = await self._store.read_positioned(
            tenant_id, "thread", thread_id, after=state.position, from_leader=from_leader
        )
        for event in newer:
            state = state.apply(event)
        if position != state.position:
            state = replace(state, position=position)  # past a message that is no event
        self.put(state)
        return state

    def cached(self, tenant_id: str, thread_id: str) -> ThreadState | None:
        """The thread as this process last stored or read it, without asking the log (None
        when it has not, or had it as not existing): possibly behind the log."""
        state = self._get((tenant_id, thread_id))
        return state if state is not None and state.exists else None

    def advance(self, state: ThreadState, events: tuple[RecordedEvent, ...]) -> ThreadState:
        """Apply events this process just appended, without reading them back."""
        for event in events:
            state = state.apply(event)
        self.put(state)
        return state

    def put(self, state: ThreadState) -> None:
        key = (state.tenant_id, state.thread_id)
        kept, other, capacity = self._states, self._resting, self._capacity
        if _at_rest(state):
            kept, other, capacity = self._resting, self._states, self._resting_capacity
        other.pop(key, None)
        kept[key] = state
        kept.move_to_end(key)
        while len(kept) > capacity:
            kept.popitem(last=False)
        while len(self._states) + len(self._resting) > self._capacity:
            self._states.popitem(last=False)

    def forget(self, tenant_id: str, thread_id: str) -> None:
        self._states.pop((tenant_id, thread_id), None)
        self._resting.pop((tenant_id, thread_id), None)

    def shed_resting(self) -> int:
        """Drop every thread at rest (read back from the log when next loaded): what an
        overload left folded here, its messages with it. How many were dropped."""
        dropped = len(self._resting)
        self._resting.clear()
        return dropped

    def __len__(self) -> int:
        return len(self._states) + len(self._resting)

    def _get(self, key: tuple[str, str]) -> ThreadState | None:
        return self._states.get(key) or self._resting.get(key)


def _at_rest(state: ThreadState) -> bool:
    """Nothing runs on the thread until someone acts: no run, or a run parked or ended."""
    run = state.active_run
    return run is None or run.status == "paused" or run.terminal


class BlueprintCache:
    """An agency's dynamic blueprints, from its `blueprint.saved` / `.deleted` events.

    Unwatched, every lookup reads the agency's newer events. Watched (`watch`), entries are
    dropped when a blueprint event of their agency passes on the bus and re-read otherwise
    only after `ttl` seconds: an agency's events lie far back in a busy stream, and reading
    past them on every step was a large share of a run's cost.
    """

    def __init__(self, store: AggregateStore, *, ttl: float = 5.0) -> None:
        self._store = store
        self._ttl = ttl
        self._watching = False
        self._agencies: dict[tuple[str, str], tuple[Position, dict[str, BlueprintSpec], float]] = {}
        self._subscriptions: list[Subscription] = []

    async def watch(self, nc: NATS) -> None:
        async def forget(msg: Msg) -> None:
            if event_type_of(msg) in _BLUEPRINT_CHANGES:
                found = aggregate_of(msg.subject)
                if found is not None:
                    self._agencies.pop((found[0], found[2]), None)

        for subject in live_filters("agency"):
            self._subscriptions.append(await nc.subscribe(subject, cb=forget))
        self._watching = True

    async def close(self) -> None:
        for sub in self._subscriptions:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subscriptions.clear()
        self._watching = False

    async def dynamic(self, tenant_id: str, agency_id: str) -> dict[str, BlueprintSpec]:
        key = (tenant_id, agency_id)
        now = time.monotonic()
        position, blueprints, read_at = self._agencies.get(key, (Position(), {}, -1.0))
        if self._watching and read_at >= 0 and now - read_at < self._ttl:
            return blueprints
        newer = await self._store.read(tenant_id, "agency", agency_id, after=position)
        if newer:
            blueprints = dict(blueprints)
            for event in newer:
                match event.payload:
                    case BlueprintSaved(blueprint=spec):
                        blueprints[spec.name] = spec
                    case BlueprintDeleted(name=name):
                        blueprints.pop(name, None)
            position = newer[-1].position
        self._agencies[key] = (position, blueprints, now)
        return blueprints
