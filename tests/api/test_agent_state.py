"""A code agent's state (`agent.state_set`) is answered by `/state` as `agentState`."""

from __future__ import annotations

import httpx

from contracts.events import AgentStateSet
from infra.jetstream.connection import Bus
from infra.jetstream.records import EventContext
from tests.api.conftest import Thread
from tests.helpers import assert_eventually


async def set_state(bus: Bus, thread: Thread, value: object) -> None:
    tenant = thread.tenant.id
    position = await bus.store.last_position(tenant, "thread", thread.thread_id)
    await bus.store.append(
        tenant,
        "thread",
        thread.thread_id,
        [AgentStateSet(run_id="run_x", value=value)],
        expected=position,
        context=EventContext(agency_id=thread.agency_id, thread_id=thread.thread_id),
    )


async def test_state_answers_the_last_value_set(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    r = await client.get(thread_a.path + "/state", headers=thread_a.tenant.auth)
    assert r.status_code == 200, r.text
    assert r.json()["state"].get("agentState") is None

    await set_state(bus, thread_a, {"count": 1})
    await set_state(bus, thread_a, {"count": 2, "notes": ["a\u0000b"]})

    async def shown() -> None:
        r = await client.get(thread_a.path + "/state", headers=thread_a.tenant.auth)
        assert r.json()["state"]["agentState"] == {"count": 2, "notes": ["a\ufffdb"]}

    await assert_eventually(shown)
