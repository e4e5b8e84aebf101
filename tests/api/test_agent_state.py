"""A code agent's state (`agent.state_set`) is answered by `/state` as `agentState`."""

from __future__ import annotations

from dataclasses import replace

import httpx
import msgspec

from agency import AgentContext
from agency.contracts.events import AgentStateSet, ChatMessage
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext
from agency.services.agents.code import CodeAgent
from agency.services.agents.system import AgentSystem
from tests.api.conftest import Api, Tenant, Thread, create_agency, running_api
from tests.helpers import assert_eventually


class Coder(CodeAgent):
    class Settings(msgspec.Struct, kw_only=True):
        limit: int = 1

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        return None


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


async def test_saved_settings_of_a_code_agent_are_checked(api: Api, tenant_a: Tenant) -> None:
    deps = replace(api.deps, system=AgentSystem().code_agent("coder", Coder))
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as client:
        agency = await create_agency(client, tenant_a)
        path = f"/agency/{agency}/blueprints"
        bad = {"name": "coder", "config": {"extra": {"settings": {"limit": "many"}}}}
        r = await client.post(path, json=bad, headers=tenant_a.auth)
        assert r.status_code == 400, r.text
        assert "code agent 'coder': settings field 'limit'" in r.json()["error"]
        good = {"name": "coder", "config": {"extra": {"settings": {"limit": 3}}}}
        r = await client.post(path, json=good, headers=tenant_a.auth)
        assert r.status_code in (201, 202), r.text
