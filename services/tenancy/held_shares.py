"""Each tenant's share of what a command consumer holds, by the admission's rules.

A command consumer fetches its commands in the order they were stored, so a tenant that
floods its command subjects over NATS would put its backlog in front of everyone else's.
With these shares (`WorkerTuning.shares`) the worker's held messages (fetched, not yet
settled) are a pool of the admission's kind (`admission.py`): while it has room nobody is
refused; once it is full, a tenant holding its share or more (its weight's part among the
tenants holding some) has its next command refused, if that command came through the
gateway (what a tenant's own NATS credentials send; the HTTP side is refused at its own
door), and the worker dead-letters it at once with the reason and the seconds to wait. A
refusal costs a dead letter, not a handler, so the flood drains at that pace and the other
tenants' commands behind it are taken up; a tenant under its share is never refused.
"""

from __future__ import annotations

from collections import defaultdict, deque

from agency.services.tenancy.admission import (
    AdmissionSettings,
    OpenPool,
    Refused,
    Ticket,
    parse_weights,
)

_HELD = "commands held by this consumer (fetched, not yet handled)"
# What a command consumer of the runtime or the registry fetches and holds at once: its
# handlers (64) and as many more. The shared pool is smaller (`COMMANDS_SHARED`): the worker
# must go on fetching once the pool is full, to refuse what is over a share and reach the
# commands behind it.
COMMANDS_HELD = 128
COMMANDS_SHARED = 64


class HeldShares:
    """`capacity` messages held at once, shared by weight once full; the worker fetches
    more than that (its `held`), so it sees the pool full and refuses beyond a share.
    Satisfies `infra.jetstream.worker_tuning.TenantShares`."""

    def __init__(self, settings: AdmissionSettings, capacity: int) -> None:
        self.enabled = settings.enabled
        self._pool = OpenPool(parse_weights(settings.weights), _HELD, max_open=capacity)
        # Each tenant's places, oldest first: a release gives back the oldest (lanes run in
        # the order fetched), so the time a place was held is about right.
        self._tickets: defaultdict[str, deque[Ticket]] = defaultdict(deque)

    @classmethod
    def from_env(cls, capacity: int = COMMANDS_SHARED) -> HeldShares:
        """With the admission's settings (`AGENCY_ADMISSION_ENABLED`, `…_WEIGHTS`)."""
        return cls(AdmissionSettings.from_env(), capacity)

    def held(self, tenant: str) -> int:
        return self._pool.held[tenant]

    def hold(self, tenant: str, now: float, *, refusable: bool) -> str | None:
        if not self.enabled:
            return None
        if refusable:
            try:
                ticket = self._pool.enter(tenant, now)
            except Refused as refused:
                return str(refused)
        else:
            # Counted, never refused: the services' own commands, and the HTTP side's,
            # admitted at its door.
            ticket = self._pool.admit(tenant, now)
        self._tickets[tenant].append(ticket)
        return None

    def release(self, tenant: str, now: float) -> None:
        tickets = self._tickets.get(tenant)
        if not tickets:
            return
        tickets.popleft().done(now)
        if not tickets:
            del self._tickets[tenant]
