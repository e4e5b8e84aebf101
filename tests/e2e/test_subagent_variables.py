"""Scoped-variable bootstrap over HTTP: a spawn held back for missing `scopedEnv` values
(`subagent_env_required`), `GET` / `POST /threads/{t}/variables/{r}`, the child booted."""

from __future__ import annotations

import json

import httpx
import msgspec
import pytest

from agency.contracts.events import SubagentEnvRequired, SubagentSpawned, ToolError
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.sealing import unseal
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, Client
from tests.helpers import assert_eventually, created_tenant, settled


async def save(client: Client, blueprint: dict[str, object]) -> None:
    r = await client.http.post(f"/agency/{client.agency}/blueprints", json=blueprint)
    assert r.status_code == 201, r.text


async def until_log(
    bus: Bus, client: Client, thread: str, terminals: int, timeout: float = 30
) -> list[RecordedEvent]:
    async def ended() -> list[RecordedEvent]:
        events = await bus.store.read(client.tenant, "thread", thread)
        assert sum(e.type in RUN_TERMINAL_TYPES for e in events) >= terminals
        return events

    return await assert_eventually(ended, timeout=timeout)


async def other_tenant(url: str) -> dict[str, str]:
    """The headers of a new tenant's key."""
    async with httpx.AsyncClient(base_url=url, timeout=20) as admin:
        key, _, _ = await created_tenant(admin, ADMIN, "other")
        return {"Authorization": f"Bearer {key}"}


async def test_missing_scoped_variables_are_asked_for_then_provided_and_the_child_boots(
    client: Client,
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
    system_api: tuple[str, FakeLLMServer],
) -> None:
    suffix = new_id()
    present, absent = f"AGENCY_TEST_REGION_{suffix}", f"AGENCY_TEST_TOKEN_{suffix}"
    monkeypatch.setenv(present, "eu-west")
    monkeypatch.setenv("AGENCY_TENANT_ENV", present)  # the operator exposes it to tenants
    secret = "tok-" + new_id()
    child, parent = f"vchild{suffix[-8:]}".lower(), f"vparent{suffix[-8:]}".lower()
    await save(client, {"name": child, "prompt": f"{child} prompt", "tags": ["default"]})
    entry = {
        "name": child,
        "resumable": True,
        "blocking": True,
        "immediate": {"scopedEnv": [present, absent]},
    }
    await save(
        client,
        {
            "name": parent,
            "prompt": f"{parent} prompt",
            "tags": ["default"],
            "config": {"subagents": {"subagents": [entry]}},
        },
    )
    client.llm.script(f"{child} prompt", [ScriptStep(content="child used its token")])
    client.llm.script(
        f"{parent} prompt",
        [
            ScriptStep(content="unused"),  # the bootstrap call is turn 0
            ScriptStep(content="waiting for the token"),
            ScriptStep(content="got the child's report"),
        ],
    )
    thread = await client.thread(parent)
    await client.invoke(thread, "set up the workspace")
    events = await until_log(bus, client, thread, 1)

    # The immediate subagent_create could not spawn: a structured tool error, a request.
    (required,) = [e.payload for e in events if isinstance(e.payload, SubagentEnvRequired)]
    (error,) = [e.payload for e in events if isinstance(e.payload, ToolError)]
    problem = json.loads(error.error)
    assert problem["error"] == "subagent_env_required"
    assert problem["requestId"] == required.request_id and problem["missing"] == [absent]
    assert not any(isinstance(e.payload, SubagentSpawned) for e in events)
    url = f"/threads/{thread}/variables/{required.request_id}"

    r = await client.http.get(url)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["required"] == [present, absent] and answer["missing"] == [absent]
    assert answer["status"] == "pending" and answer["subagentType"] == child
    assert (await client.http.get(f"/threads/{thread}/variables/var_nope")).status_code == 404
    assert (await client.http.get(f"/threads/{new_id()}/variables/x")).status_code == 404
    # Another tenant's key finds nothing there, and can provide nothing.
    stranger = await other_tenant(system_api[0])
    r = await client.http.get(url, headers=stranger)
    assert r.status_code == 404, r.text
    r = await client.http.post(url, json={"values": {absent: "stolen"}}, headers=stranger)
    assert r.status_code == 404, r.text
    r = await client.http.post(url, json={"values": {present: "x"}})
    assert r.status_code == 400 and absent in r.text
    r = await client.http.post(url, json={"values": {absent: secret, "OTHER": "y"}})
    assert r.status_code == 400 and "OTHER" in r.text

    r = await client.http.post(url, json={"values": {absent: secret}})
    assert r.status_code == 202, r.text
    child_thread = r.json()["childThreadId"]
    # The child ran, and its report reached the parent as a message: a second run.
    events = await until_log(bus, client, thread, 2)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"] * 2
    assert settled(events)[-1].payload.result == "got the child's report"  # type: ignore[attr-defined]
    (link,) = [e.payload for e in events if isinstance(e.payload, SubagentSpawned)]
    assert link.child_thread_id == child_thread
    child_events = await until_log(bus, client, child_thread, 1)
    # The child has both variables in its scope, from the environment and as provided.
    scope = unseal(fold(client.tenant, child_thread, child_events).sealed_env)
    assert scope == {present: "eu-west", absent: secret}
    last = next(
        r for r in reversed(client.llm.requests) if f"{parent} prompt" in str(r["messages"][0])
    )
    assert "child used its token" in str(last["messages"])
    # The value was never shown to a model, written in clear, or answered over HTTP.
    assert secret not in json.dumps(client.llm.requests)
    for event in (*events, *child_events):
        assert secret not in json.dumps(msgspec.to_builtins(event.envelope.payload))
    r = await client.http.get(url)
    assert r.json()["status"] == "provided" and r.json()["missing"] == []
    assert secret not in r.text
    r = await client.http.get(f"{client.path(thread)}/events")
    assert r.status_code == 200 and secret not in r.text
    r = await client.http.post(url, json={"values": {absent: secret}})
    assert r.status_code == 409, r.text
