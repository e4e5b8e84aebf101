"""A tenant's blueprint reads only its own variables: never the server's environment."""

from __future__ import annotations

import json

import pytest

from agency.contracts.ids import new_id
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.sealing import unseal
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.security.conftest import save, text_of, until_runs_end


def names(suffix: str) -> tuple[str, str]:
    return f"sparent{suffix[-8:]}".lower(), f"schild{suffix[-8:]}".lower()


async def parent_of(client: Client, parent: str, child: str, entry: dict[str, object]) -> None:
    r = await save(client, {"name": child, "prompt": f"{child} prompt", "tags": ["default"]})
    assert r.status_code == 201, r.text
    r = await save(
        client,
        {
            "name": parent,
            "prompt": f"{parent} prompt",
            "tags": ["default"],
            "config": {"subagents": {"subagents": [{"name": child, **entry}]}},
        },
    )
    assert r.status_code == 201, r.text


def env_required(found: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e["data"] for e in found if e["type"] == "subagent.env_required"]


async def test_a_tenants_blueprint_naming_server_secrets_never_sees_them(
    tenant: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin_secret, api_key = "adm-" + new_id(), "sk-" + new_id()
    monkeypatch.setenv("AGENCY_ADMIN_SECRET", admin_secret)
    monkeypatch.setenv("OPENAI_API_KEY", api_key)
    parent, child = names(new_id())
    immediate = {
        "nameEnv": "AGENCY_ADMIN_SECRET",
        "descriptionEnv": "OPENAI_API_KEY",
        "scopedEnv": ["AGENCY_ADMIN_SECRET"],
    }
    await parent_of(
        tenant, parent, child, {"resumable": True, "blocking": True, "immediate": immediate}
    )
    tenant.llm.script(f"{child} prompt", [ScriptStep(content="child ran")])
    tenant.llm.script(
        f"{parent} prompt", [ScriptStep(content="unused"), ScriptStep(content="waiting")]
    )
    thread = await tenant.thread(parent)
    await tenant.invoke(thread, "start the work")
    found = await until_runs_end(tenant, thread)

    everything = text_of(found)
    assert admin_secret not in everything and api_key not in everything
    assert admin_secret not in json.dumps(tenant.llm.requests)
    assert api_key not in json.dumps(tenant.llm.requests)
    # The variable reads as missing, so the documented bootstrap asks for it.
    (asked,) = env_required(found)
    assert asked["missing"] == ["AGENCY_ADMIN_SECRET"]
    # The hints fall back to what the tenant gave: the entry's name, its own message.
    (call,) = [
        c
        for e in found
        if e["type"] == "message.appended"
        for c in e["data"]["message"].get("toolCalls") or ()
    ]
    assert json.loads(call["arguments"])["name"] == child
    assert json.loads(call["arguments"])["message"] == "start the work"


async def test_an_optional_flag_of_the_server_is_off_unless_exposed_or_the_tenants_own(
    tenant: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = "AGENCY_TEST_FLAG_" + new_id()
    monkeypatch.setenv(flag, "yes")

    async def offered(env: dict[str, str]) -> bool:
        parent, child = names(new_id())
        r = await save(tenant, {"name": child, "prompt": "helper", "tags": ["default"]})
        assert r.status_code == 201, r.text
        config = {"subagents": {"subagents": [{"name": child, "optional": flag}]}}
        blueprint = {"name": parent, "prompt": f"{parent} prompt", "tags": ["default"]}
        r = await save(tenant, {**blueprint, "config": config, "env": env})
        assert r.status_code == 201, r.text
        tenant.llm.script(f"{parent} prompt", [ScriptStep(content="looked")])
        thread = await tenant.thread(parent)
        await tenant.invoke(thread, "look at your tools")
        await until_runs_end(tenant, thread)
        request = next(r for r in tenant.llm.requests if f"{parent} prompt" in str(r))
        tools = [t["function"]["name"] for t in request.get("tools") or ()]
        return "task" in tools and child in json.dumps(request["tools"])

    assert not await offered({})  # the process's `yes` is not the tenant's
    assert await offered({flag: "yes"})  # the blueprint's own env is
    monkeypatch.setenv("AGENCY_TENANT_ENV", f"{tenant.tenant}={flag}")
    assert await offered({})  # and so is a variable the operator exposes to this tenant


async def test_exposed_variables_and_the_blueprints_env_reach_the_child_others_do_not(
    tenant: Client, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix = new_id()
    mine, theirs, hint = (f"AGENCY_TEST_{k}_{suffix}" for k in ("MINE", "THEIRS", "NAME"))
    monkeypatch.setenv(mine, "exposed-" + suffix)
    monkeypatch.setenv(theirs, "private-" + suffix)
    # Each tenant gets what the operator exposes to it: `mine` to this one, `theirs` to another.
    monkeypatch.setenv("AGENCY_TENANT_ENV", f"{tenant.tenant}={mine}, t_other={theirs}")
    parent, child = names(suffix)
    immediate = {"nameEnv": hint, "scopedEnv": [mine, theirs]}
    r = await save(tenant, {"name": child, "prompt": f"{child} prompt", "tags": ["default"]})
    assert r.status_code == 201, r.text
    entry = {"name": child, "resumable": True, "blocking": True, "immediate": immediate}
    r = await save(
        tenant,
        {
            "name": parent,
            "prompt": f"{parent} prompt",
            "tags": ["default"],
            "env": {hint: "scout-from-blueprint"},
            "config": {"subagents": {"subagents": [entry]}},
        },
    )
    assert r.status_code == 201, r.text
    tenant.llm.script(f"{child} prompt", [ScriptStep(content="child ran")])
    tenant.llm.script(
        f"{parent} prompt",
        [ScriptStep(content="unused"), ScriptStep(content="waiting"), ScriptStep(content="done")],
    )
    thread = await tenant.thread(parent)
    await tenant.invoke(thread, "start")
    found = await until_runs_end(tenant, thread)
    assert "private-" + suffix not in text_of(found)
    (asked,) = env_required(found)
    assert asked["missing"] == [theirs]
    call = next(
        c
        for e in found
        if e["type"] == "message.appended"
        for c in e["data"]["message"].get("toolCalls") or ()
    )
    assert json.loads(call["arguments"])["name"] == "scout-from-blueprint"

    # Provided by a person, the missing one joins: the child's scope holds both.
    url = f"/threads/{thread}/variables/{asked['requestId']}"
    r = await tenant.http.post(url, json={"values": {theirs: "given"}})
    assert r.status_code == 202, r.text
    child_thread = r.json()["childThreadId"]
    await until_runs_end(tenant, thread, runs=2)
    scope = unseal(
        fold(
            tenant.tenant, child_thread, await bus.store.read(tenant.tenant, "thread", child_thread)
        ).sealed_env
    )
    assert scope == {mine: "exposed-" + suffix, theirs: "given"}
