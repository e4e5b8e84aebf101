"""A code agent's settings over HTTP: the schema, defaults and effective values, and the
agency's overrides validated against the schema."""

from __future__ import annotations

import httpx
import msgspec

from tests.api.code_agents import TUNER, Tuner
from tests.api.conftest import STATIC_AGENT, Tenant, create_agency


async def test_a_code_agents_settings_are_described(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency = await create_agency(client, tenant_a)
    r = await client.get(f"/agency/{agency}/blueprints", headers=tenant_a.auth)
    assert r.status_code == 200, r.text
    kinds = {b["name"]: b["kind"] for b in r.json()}
    assert kinds[TUNER] == "code" and kinds[STATIC_AGENT] == "prompt"
    r = await client.get(f"/agency/{agency}/blueprints/{TUNER}", headers=tenant_a.auth)
    assert r.status_code == 200 and r.json()["kind"] == "code", r.text

    r = await client.get(f"/agency/{agency}/blueprints/{TUNER}/settings", headers=tenant_a.auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["agentType"] == TUNER and body["kind"] == "code"
    assert body["settingsSchema"] == msgspec.json.schema(Tuner.Settings)
    assert body["registered"] == {"tone": "warm"} and body["overrides"] == {}
    assert body["settings"] == {"tone": "warm", "temperature": 0.2, "max_words": 100, "topics": []}
    fields = {f["name"]: f for f in body["fields"]}
    assert list(fields) == ["tone", "temperature", "max_words", "topics"]
    assert fields["tone"] == {
        "name": "tone",
        "type": "string",
        "required": False,
        "default": "plain",
        "value": "warm",
        "overridden": False,
    }
    assert fields["temperature"]["type"] == "number" and fields["temperature"]["default"] == 0.2
    assert fields["max_words"]["type"] == "integer" and fields["max_words"]["value"] == 100
    assert fields["topics"]["type"] == "array of string" and fields["topics"]["default"] == []


async def test_overrides_are_validated_and_saved_for_the_agency(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency = await create_agency(client, tenant_a)
    path = f"/agency/{agency}/blueprints/{TUNER}/settings"
    for bad, field in (
        ({"max_words": "many"}, "max_words"),
        ({"temperature": "hot"}, "temperature"),
        ({"colour": "red"}, "colour"),
    ):
        r = await client.put(path, json={"settings": bad}, headers=tenant_a.auth)
        assert r.status_code == 400, r.text
        assert f"settings field '{field}'" in r.json()["error"], r.text
    r = await client.put(path, json={"settingz": {}}, headers=tenant_a.auth)
    assert r.status_code == 400, r.text

    r = await client.put(
        path, json={"settings": {"max_words": 7, "topics": ["tea"]}}, headers=tenant_a.auth
    )
    assert r.status_code == 200, r.text
    saved = r.json()
    assert saved["overrides"] == {"max_words": 7, "topics": ["tea"]}
    assert saved["settings"] == {
        "tone": "warm",
        "temperature": 0.2,
        "max_words": 7,
        "topics": ["tea"],
    }
    assert saved["revision"] == 1
    r = await client.get(path, headers=tenant_a.auth)
    assert r.json()["settings"] == saved["settings"], r.text
    overridden = {f["name"] for f in r.json()["fields"] if f["overridden"]}
    assert overridden == {"max_words", "topics"}
    # Stored as the agency's blueprint of the agent, where the runtime reads them.
    r = await client.get(f"/agency/{agency}/blueprints/{TUNER}", headers=tenant_a.auth)
    assert r.json()["source"] == "dynamic", r.text
    assert r.json()["config"]["extra"] == {"settings": {"max_words": 7, "topics": ["tea"]}}
    # Another agency keeps the registered settings.
    other = await create_agency(client, tenant_a)
    r = await client.get(f"/agency/{other}/blueprints/{TUNER}/settings", headers=tenant_a.auth)
    assert r.json()["overrides"] == {} and r.json()["settings"]["max_words"] == 100
    # `{}` clears the overrides.
    r = await client.put(path, json={"settings": {}}, headers=tenant_a.auth)
    assert r.status_code == 200 and r.json()["settings"]["max_words"] == 100, r.text


async def test_settings_of_what_is_not_a_code_agent_are_not_found(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    agency = await create_agency(client, tenant_a)
    path = f"/agency/{agency}/blueprints/nobody/settings"
    r = await client.get(path, headers=tenant_a.auth)
    assert r.status_code == 404, r.text
    r = await client.put(path, json={"settings": {}}, headers=tenant_a.auth)
    assert r.status_code == 404, r.text
    # A prompt blueprint exists but has no settings: described as such, never changed.
    path = f"/agency/{agency}/blueprints/{STATIC_AGENT}/settings"
    r = await client.get(path, headers=tenant_a.auth)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["kind"], body["settingsSchema"], body["fields"], body["settings"]) == (
        "prompt",
        None,
        [],
        None,
    )
    r = await client.put(path, json={"settings": {}}, headers=tenant_a.auth)
    assert r.status_code == 409 and "not a code agent" in r.json()["error"], r.text
    r = await client.get(f"/agency/{agency}/blueprints/{TUNER}/settings", headers=tenant_b.auth)
    assert r.status_code == 404, r.text
