"""Nothing unreadable is ever appended: every event is checked against its contract first."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agency.contracts.events import RunStarted, RunTick
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import InvalidEvent
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import Position
from agency.services.runtime.replay.memstore import MemoryEventStore

Backend = Callable[[Bus], AggregateStore]
BACKENDS: dict[str, Backend] = {
    "jetstream": lambda bus: bus.store,
    "memory": lambda bus: MemoryEventStore(),
}


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, bus: Bus) -> AggregateStore:
    return BACKENDS[request.param](bus)


async def test_a_bool_in_an_int_field_is_refused_naming_the_event_and_the_field(
    store: AggregateStore, tenant: str
) -> None:
    thread = new_id()
    bad = RunStarted(run_id="r1", agent_type="helper", max_steps=True)

    with pytest.raises(InvalidEvent) as info:
        await store.append(tenant, "thread", thread, [RunTick(run_id="r1", step=1), bad],
                           expected=Position())  # fmt: skip

    assert info.value.event_type == "run.started"
    assert info.value.field == "max_steps"
    assert "Expected `int`, got `bool`" in str(info.value)
    assert await store.read(tenant, "thread", thread) == []


async def test_after_a_refused_event_the_thread_goes_on_without_a_gap(
    store: AggregateStore, tenant: str
) -> None:
    thread = new_id()
    first = await store.append(tenant, "thread", thread, [RunTick(run_id="r1", step=1)],
                               expected=Position())  # fmt: skip
    with pytest.raises(InvalidEvent):
        await store.append(tenant, "thread", thread, [RunTick(run_id="r1", step="2")],  # type: ignore[arg-type]
                           expected=first.position)  # fmt: skip
    await store.append(tenant, "thread", thread, [RunTick(run_id="r1", step=2)],
                       expected=first.position)  # fmt: skip

    events = await store.read(tenant, "thread", thread)

    assert [e.seq for e in events] == [1, 2]
