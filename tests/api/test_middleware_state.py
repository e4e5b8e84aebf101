"""`/state` with middleware parts: each a fold of the thread's log, under its name."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from agency.contracts.events import ToolRegistered
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.services.agents.middleware import Middleware, state_parts
from agency.services.agents.system import AgentSystem
from agency.services.agents.view import ThreadView
from agency.services.threads.view import thread_view
from tests.api.conftest import Api, Tenant, Thread, append_messages, create_agency
from tests.api.stateful import COUNTED_AGENT, BrokenState, MessageCounter
from tests.helpers import assert_eventually


async def test_middleware_parts_are_folds_of_the_log_under_their_camel_case_names(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency = await create_agency(client, tenant_a)
    r = await client.post(
        f"/agency/{agency}/agents", json={"agentType": COUNTED_AGENT}, headers=tenant_a.auth
    )
    assert r.status_code == 201, r.text
    thread = Thread(tenant_a, agency, r.json()["id"])
    await append_messages(bus, thread, "one", "two")

    async def counted() -> dict[str, object]:
        r = await client.get(thread.path + "/state", headers=tenant_a.auth)
        assert r.status_code == 200, r.text
        state = r.json()["state"]
        assert state["messageCounter"] == {"user_messages": 2, "last": "two"}
        assert [m["content"] for m in state["messages"]] == ["one", "two"]
        return dict(state)

    state = await assert_eventually(counted)
    # A part that raises is shown as its error; the rest of the state is still there.
    assert state["brokenState"] == {"error": "RuntimeError: no state today"}
    # The same fold of the same log gives the same part: nothing comes from memory.
    history = await bus.store.read(tenant_a.id, "thread", thread.thread_id)
    folded = fold(tenant_a.id, thread.thread_id, history)
    assert state_parts([MessageCounter()], thread_view(folded)) == {
        "messageCounter": state["messageCounter"]
    }


async def test_a_thread_without_stateful_middleware_has_no_extra_keys(
    client: httpx.AsyncClient, thread_a: Thread
) -> None:
    r = await client.get(thread_a.path + "/state", headers=thread_a.tenant.auth)
    assert r.status_code == 200, r.text
    assert "messageCounter" not in r.json()["state"]


def test_a_state_part_cannot_take_a_key_of_the_state_itself() -> None:
    class Todos(Middleware):
        name = "todos"

        def state(self, state: ThreadView) -> object:
            return []

    with pytest.raises(ValueError, match="'todos'"):
        AgentSystem().use(Todos())
    AgentSystem().use(BrokenState())  # other names are fine


async def test_registered_tools_are_listed_in_the_state_as_recorded(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency = await create_agency(client, tenant_a)
    r = await client.post(
        f"/agency/{agency}/agents", json={"agentType": COUNTED_AGENT}, headers=tenant_a.auth
    )
    thread = Thread(tenant_a, agency, r.json()["id"])

    async def tool_names() -> list[str]:
        r = await client.get(thread.path + "/state", headers=tenant_a.auth)
        assert r.status_code == 200, r.text
        return [t["name"] for t in r.json()["state"]["tools"]]

    assert "echo" not in await assert_eventually(tool_names)
    position = await bus.store.last_position(tenant_a.id, "thread", thread.thread_id)
    registered = ToolRegistered(
        middleware="message_counter", name="echo", description="as recorded", kind="state"
    )
    await bus.store.append(
        tenant_a.id, "thread", thread.thread_id, [registered], expected=position,
        context=EventContext(agency_id=agency, thread_id=thread.thread_id),
    )  # fmt: skip
    r = await client.get(thread.path + "/state", headers=tenant_a.auth)
    (echo,) = [t for t in r.json()["state"]["tools"] if t["name"] == "echo"]
    assert echo["description"] == "as recorded"


async def test_a_thread_read_again_costs_only_its_new_events(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API keeps threads folded by position: `/state`'s parts and a command's checks
    read only what the log got since the last look, not the whole thread again."""
    agency = await create_agency(client, tenant_a)
    r = await client.post(
        f"/agency/{agency}/agents", json={"agentType": COUNTED_AGENT}, headers=tenant_a.auth
    )
    assert r.status_code == 201, r.text
    thread = Thread(tenant_a, agency, r.json()["id"])
    await append_messages(bus, thread, *(f"m{i}" for i in range(30)))
    read: list[int] = []
    store = api.deps.bus.store
    original = store.read_positioned

    async def counted(*args: Any, **kwargs: Any) -> tuple[list[RecordedEvent], Position]:
        events, position = await original(*args, **kwargs)
        if args[1] == "thread":  # the thread's reads (a cancel also looks at its tree)
            read.append(len(events))
        return events, position

    monkeypatch.setattr(store, "read_positioned", counted)
    r = await client.get(thread.path + "/state", headers=tenant_a.auth)
    assert r.json()["state"]["messageCounter"]["user_messages"] == 30
    await append_messages(bus, thread, "one more")
    r = await client.get(thread.path + "/state", headers=tenant_a.auth)
    assert r.json()["state"]["messageCounter"] == {"user_messages": 31, "last": "one more"}
    r = await client.post(thread.path + "/cancel", headers=tenant_a.auth)
    assert r.status_code == 409 and "no active run" in r.json()["error"]
    # The second `/state` reads the one new event; the cancel's checks read nothing new.
    assert read[0] >= 31 and read[1] == 1 and read[2:] and not any(read[2:]), read
