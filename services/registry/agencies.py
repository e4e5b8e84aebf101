"""An agency's registry state, kept folded, so a decision on it reads only what is new.

Creating an agency and saving or deleting its blueprints are decided on `AgencyState`: does
the agency exist, how many times each blueprint name was saved (the next save's revision),
which names are saved and not deleted since, and which command keys already left their
events (a redelivered command decides nothing). `AgencyState.fold` builds it from the
agency's events; `Agencies` keeps the states of the agencies it saw, each with the log
position it stands at, and brings one up to date by reading the events after that
position only. A save thus costs the same for an agency's first blueprint and its
ten-thousandth, where reading the whole agency each time grew with every save.

Appends still expect the position the decision was made at: a save racing another
registry process (or a state gone stale) conflicts, reads what it missed and decides
again, as `services/decide.py` does. The state is a fold of the log and nothing
else, so a process that starts cold, or forgets an agency, reads it whole once and
decides the same.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from agency.contracts.events import (
    AgencyCreated,
    AnyEvent,
    BlueprintDeleted,
    BlueprintSaved,
    WebhookSubscribed,
    WebhookUnsubscribed,
)
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.infra.keyed_locks import KeyedLocks
from agency.services.decide import CONFLICT_ATTEMPTS, DecisionConflict, conflict_pause

# Agencies whose state a registry process keeps (the least recently used go first).
AGENCIES_KEPT = 1_000


@dataclass(slots=True)
class AgencyState:
    """What the registry decides an agency's commands on, folded from its events."""

    position: Position = field(default_factory=Position)
    created: bool = False
    # name → how many times it was saved (deleted or not): the last revision given.
    revisions: dict[str, int] = field(default_factory=dict)
    # Names saved and not deleted since.
    saved: set[str] = field(default_factory=set)
    # Webhook subscriptions made and not removed since.
    webhooks: set[str] = field(default_factory=set)
    # Idempotency keys of the commands whose events the agency holds.
    keys: set[str] = field(default_factory=set)

    @classmethod
    def fold(cls, events: Iterable[RecordedEvent]) -> AgencyState:
        state = cls()
        state.apply(events)
        return state

    def apply(self, events: Iterable[RecordedEvent], position: Position | None = None) -> None:
        """Fold the events past this state's position; then stand at `position` if later
        (a read's end may pass messages that are no events)."""
        for event in events:
            if event.stream_seq <= self.position.stream_seq:
                continue  # folded already
            self.position = event.position
            if event.envelope.idempotency_key:
                self.keys.add(event.envelope.idempotency_key)
            match event.payload:
                case AgencyCreated():
                    self.created = True
                case BlueprintSaved(blueprint=spec):
                    self.revisions[spec.name] = self.revisions.get(spec.name, 0) + 1
                    self.saved.add(spec.name)
                case BlueprintDeleted(name=name):
                    self.saved.discard(name)
                case WebhookSubscribed(subscription_id=subscription):
                    self.webhooks.add(subscription)
                case WebhookUnsubscribed(subscription_id=subscription):
                    self.webhooks.discard(subscription)
        if position is not None and position.stream_seq > self.position.stream_seq:
            self.position = position


AgencyDecision = Callable[[AgencyState], Sequence[AnyEvent]]


class Agencies:
    """The agencies' states, each brought up to date before a decision on it."""

    def __init__(self, store: AggregateStore, *, kept: int = AGENCIES_KEPT) -> None:
        self._store = store
        self._kept = kept
        self._states: OrderedDict[tuple[str, str], AgencyState] = OrderedDict()
        # One decision at a time per agency in this process; other processes conflict.
        self._locks: KeyedLocks[tuple[str, str]] = KeyedLocks()

    async def current(self, tenant: str, agency_id: str) -> AgencyState:
        """The agency's state as the log holds it now (read past what was folded)."""
        async with self._locks.lock((tenant, agency_id)):
            return await self._refresh(tenant, agency_id)

    async def decide_and_append(
        self,
        tenant: str,
        agency_id: str,
        decide: AgencyDecision,
        *,
        idempotency_key: str,
    ) -> None:
        """Decide on the agency's current state and append what was decided at its
        position; on a conflict, read what was missed and decide again."""
        async with self._locks.lock((tenant, agency_id)):
            for attempt in range(CONFLICT_ATTEMPTS):
                state = await self._refresh(tenant, agency_id)
                events = decide(state)
                if not events:
                    return
                try:
                    result = await self._store.append(
                        tenant, "agency", agency_id, events,
                        expected=state.position,
                        context=EventContext(agency_id=agency_id),
                        idempotency_key=idempotency_key,
                    )  # fmt: skip
                except ConcurrencyError:
                    await asyncio.sleep(conflict_pause(attempt))
                    continue
                # A duplicate (stored by an earlier attempt) is folded by the next read.
                state.apply(result.events)
                return
        raise DecisionConflict(f"agency/{agency_id}", CONFLICT_ATTEMPTS)

    async def _refresh(self, tenant: str, agency_id: str) -> AgencyState:
        key = (tenant, agency_id)
        state = self._states.pop(key, None) or AgencyState()
        after = state.position if state.position.stream_seq else None
        events, position = await self._store.read_positioned(
            tenant, "agency", agency_id, after=after
        )
        state.apply(events, position)
        self._states[key] = state
        while len(self._states) > self._kept:
            self._states.popitem(last=False)
        return state
