"""The registry decides an agency's commands on its folded state: a save reads only what
is new, concurrent saves of one blueprint stay conflict-checked, and the state is the
fold of the log (a cold process decides the same)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from agency.contracts.commands import CreateAgency, DeleteBlueprint, SaveBlueprint
from agency.contracts.errors import CommandRejected
from agency.contracts.events import BlueprintSaved, BlueprintSpec
from agency.contracts.ids import new_id
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import Position, RecordedEvent
from agency.services.registry import decisions
from agency.services.registry.agencies import Agencies, AgencyState


@dataclass
class CountingStore:
    """The real store, counting the events its aggregate reads hand out."""

    store: EventStore
    read_counts: list[int] = field(default_factory=list)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def read_positioned(
        self,
        tenant_id: str,
        aggregate: Aggregate,
        aggregate_id: str,
        *,
        after: Position | None = None,
    ) -> tuple[list[RecordedEvent], Position]:
        events, position = await self.store.read_positioned(
            tenant_id, aggregate, aggregate_id, after=after
        )
        self.read_counts.append(len(events))
        return events, position


async def create(agencies: Agencies, tenant: str) -> str:
    agency = new_id().lower()
    command = CreateAgency(agency_id=agency, name="a")
    key = new_id()
    await agencies.decide_and_append(
        tenant, agency, lambda s: decisions.create_agency(command, s, key), idempotency_key=key
    )
    return agency


async def save(agencies: Agencies, tenant: str, agency: str, name: str, key: str = "") -> None:
    command = SaveBlueprint(agency_id=agency, blueprint=BlueprintSpec(name=name, prompt="p"))
    key = key or new_id()
    await agencies.decide_and_append(
        tenant, agency, lambda s: decisions.save_blueprint(command, s, key), idempotency_key=key
    )


async def revisions(bus: Bus, tenant: str, agency: str, name: str) -> list[int]:
    return [
        e.payload.revision
        for e in await bus.store.read(tenant, "agency", agency)
        if isinstance(e.payload, BlueprintSaved) and e.payload.blueprint.name == name
    ]


async def test_a_save_reads_only_the_events_since_the_last_one(bus: Bus, tenant: str) -> None:
    counting = CountingStore(bus.store)
    agencies = Agencies(counting)  # type: ignore[arg-type]
    agency = await create(agencies, tenant)
    for i in range(200):
        await save(agencies, tenant, agency, f"b{i % 50}")
    counting.read_counts.clear()
    await save(agencies, tenant, agency, "b7")
    # Only the save's own state refresh: nothing new was stored since the last save.
    assert counting.read_counts == [0]
    assert (await revisions(bus, tenant, agency, "b7"))[-1] == 5


async def test_concurrent_saves_of_one_blueprint_by_two_processes_get_distinct_revisions(
    bus: Bus, nats_url: str, tenant: str
) -> None:
    # Two registry processes, each with its own connection and its own folded states.
    async with Bus(nats_url, name="registry-2") as other_bus:
        one, two = Agencies(bus.store), Agencies(other_bus.store)
        agency = await create(one, tenant)
        await save(two, tenant, agency, "warm")  # both know the agency before the race
        await asyncio.gather(
            *(save(one if i % 2 else two, tenant, agency, "shared") for i in range(20))
        )
    assert sorted(await revisions(bus, tenant, agency, "shared")) == list(range(1, 21))


async def test_the_kept_state_is_the_fold_of_the_log_and_a_cold_process_decides_the_same(
    bus: Bus, tenant: str
) -> None:
    warm = Agencies(bus.store)
    agency = await create(warm, tenant)
    for name in ("a", "b", "a", "c"):
        await save(warm, tenant, agency, name)
    key = new_id()
    delete = DeleteBlueprint(agency_id=agency, name="b")
    await warm.decide_and_append(
        tenant, agency, lambda s: decisions.delete_blueprint(delete, s, key), idempotency_key=key
    )
    await save(warm, tenant, agency, "a", key=key)  # a redelivery of that key: nothing more
    replayed = AgencyState.fold(await bus.store.read(tenant, "agency", agency))
    kept = await warm.current(tenant, agency)
    cold = await Agencies(bus.store).current(tenant, agency)
    for state in (kept, cold):
        assert state == replayed
    assert replayed.revisions == {"a": 2, "b": 1, "c": 1} and replayed.saved == {"a", "c"}
    with pytest.raises(CommandRejected, match="no saved blueprint 'b'"):
        decisions.delete_blueprint(delete, cold, new_id())
    await save(Agencies(bus.store), tenant, agency, "a")
    assert await revisions(bus, tenant, agency, "a") == [1, 2, 3]
