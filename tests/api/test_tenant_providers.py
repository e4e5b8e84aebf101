"""Tenants' own model provider keys: set by the tenant or the admin, stored sealed, never
answered back; the admin keeps a tenant off the operator's settings; a blueprint's model
is checked against both; `agency providers` over the admin routes."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import httpx
import msgspec
import pytest

from agency.contracts.events import ChatMessage
from agency.infra.jetstream.connection import Bus
from agency.services.egress import EgressPolicy, guarded_transport
from agency.services.llm.catalog import ProviderCatalog
from agency.services.llm.errors import ModelConfigError
from agency.services.llm.port import ModelRequest
from agency.services.llm.provider import OpenAIProvider
from tests.api.conftest import Api, Tenant, create_agency, running_api
from tests.helpers import run_agency

SECRET = "sk-tenant-own-never-shown"


async def tenant_log(bus: Bus, tenant: Tenant) -> bytes:
    events = await bus.store.read(tenant.id, "tenant", tenant.id)
    return b"".join(msgspec.json.encode(e.payload) for e in events)


async def test_a_tenant_sets_its_own_key_which_is_stored_sealed_and_never_answered(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    r = await client.put("/providers/openai", json={"apiKey": SECRET}, headers=tenant_a.auth)
    assert r.status_code == 200, r.text
    assert r.json() == {"name": "openai", "hasKey": True, "baseUrlSet": False}
    own = {"apiKey": "k2", "baseUrl": "https://gw.example.com/v1"}
    r = await client.put("/providers/groq", json=own, headers=tenant_a.auth)
    assert r.status_code == 200 and r.json()["baseUrlSet"], r.text
    listed = await client.get("/providers", headers=tenant_a.auth)
    assert listed.json() == {
        "providers": [
            {"name": "groq", "hasKey": True, "baseUrlSet": True},
            {"name": "openai", "hasKey": True, "baseUrlSet": False},
        ],
        "operatorFallback": True,
    }
    log = await tenant_log(bus, tenant_a)
    assert SECRET.encode() not in log and b"gw.example.com" not in log
    removed = await client.delete("/providers/groq", headers=tenant_a.auth)
    assert removed.status_code == 204
    names = [
        p["name"]
        for p in (await client.get("/providers", headers=tenant_a.auth)).json()["providers"]
    ]
    assert names == ["openai"]


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        pytest.param("/providers/openai", {"baseUrl": "http://10.0.0.1/v1"}, 400, "field 'baseUrl'", id="plain-http"),
        pytest.param("/providers/openai", {"baseUrl": "https://example.com/v1\x7f"}, 400, "control character", id="control"),
        pytest.param("/providers/openai", {"apiKey": "k", "baseUrl": "https://127.0.0.1:5432/v1"}, 403, "loopback", id="loopback"),
        pytest.param("/providers/openai", {"apiKey": "k", "baseUrl": "https://169.254.169.254/v1"}, 403, "link-local", id="metadata"),
        pytest.param("/providers/openai", {"apiKey": "k", "baseUrl": "https://localhost/v1"}, 403, "loopback", id="localhost"),
        pytest.param("/providers/openai", {}, 400, "field 'apiKey'", id="nothing"),
        pytest.param("/providers/openai", {"apiKey": 5}, 400, "apiKey", id="not-text"),
        pytest.param("/providers/acme", {"apiKey": "k"}, 404, "no model provider 'acme'", id="unknown"),
    ],
)  # fmt: skip
async def test_bad_provider_settings_are_refused_with_the_reason(
    client: httpx.AsyncClient, tenant_a: Tenant, path: str, body: dict[str, object], status: int,
    says: str,
) -> None:  # fmt: skip
    r = await client.put(path, json=body, headers=tenant_a.auth)
    assert r.status_code == status, r.text
    assert says in r.json()["error"]


async def test_the_admin_sets_keys_and_the_policy_and_the_blueprint_check_follows(
    api: Api, client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    path = f"/tenants/{tenant_a.id}/providers/gemini"
    assert (await client.put(path, json={"apiKey": "g"}, headers=tenant_b.auth)).status_code == 403
    r = await client.put(path, json={"apiKey": SECRET}, headers=api.admin)
    assert r.status_code == 200, r.text
    catalog = ProviderCatalog.from_env({"OPENAI_API_KEY": "sk-operator"})
    async with (
        running_api(replace(api.deps, models=catalog)) as url,
        httpx.AsyncClient(base_url=url, timeout=15) as other,
    ):
        agency = await create_agency(other, tenant_a)
        blueprints = f"/agency/{agency}/blueprints"

        async def save(model: str) -> httpx.Response:
            body = {"name": "b", "model": model}
            return await other.post(blueprints, json=body, headers=tenant_a.auth)

        # Gemini by the tenant's own key, OpenAI by the operator's.
        assert (await save("gemini:gemini-2.5-flash")).status_code == 201
        assert (await save("openai:gpt-4.1")).status_code == 201
        policy = f"/tenants/{tenant_a.id}/model-policy"
        refused = await other.put(policy, json={"operatorFallback": False}, headers=tenant_a.auth)
        assert refused.status_code == 403
        r = await other.put(policy, json={"operatorFallback": False}, headers=api.admin)
        assert r.status_code == 200 and r.json()["operatorFallback"] is False, r.text
        off = await save("openai:gpt-4.1")
        assert off.status_code == 400 and "field 'model'" in off.json()["error"]
        assert "not offered" in off.json()["error"]
        assert (await save("gemini:gemini-2.5-flash")).status_code == 201
        # Another tenant is not concerned.
        agency_b = await create_agency(other, tenant_b)
        body = {"name": "b", "model": "openai:gpt-4.1"}
        ok = await other.post(f"/agency/{agency_b}/blueprints", json=body, headers=tenant_b.auth)
        assert ok.status_code == 201
    listed = await client.get(f"/tenants/{tenant_a.id}/providers", headers=api.admin)
    assert SECRET not in listed.text and listed.json()["operatorFallback"] is False


async def test_the_cli_sets_a_tenants_key_from_the_environment(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant, tmp_path: Path, bus: Bus
) -> None:
    api.write_endpoints(tmp_path)

    async def agency(*args: str) -> str:
        env = {**os.environ, "TENANT_KEY": SECRET}
        status, out, err = await run_agency(
            "providers", *args, "--data-dir", str(tmp_path), env=env
        )
        assert status == 0, err
        assert SECRET not in out + err
        return out

    said = await agency("set", tenant_a.id, "mistral", "--key-env", "TENANT_KEY")
    assert "stored sealed" in said
    assert "mistral      key set" in await agency("ls", tenant_a.id)
    assert "operator fallback: off" in await agency(
        "policy", tenant_a.id, "--operator-fallback", "off"
    )
    await agency("rm", tenant_a.id, "mistral")
    assert "mistral" not in await agency("ls", tenant_a.id)
    assert SECRET.encode() not in await tenant_log(bus, tenant_a)


async def test_a_tenants_base_url_resolving_to_loopback_is_refused_on_connecting() -> None:
    """Past the check on save (a name is resolved only on connecting), the tenant's client
    still reaches nothing it may not: the call ends with a configuration error at once."""
    llm = OpenAIProvider(
        base_url="https://localhost:9/v1",
        api_key="k",
        transport=guarded_transport(EgressPolicy.parse("")),
    )
    try:
        with pytest.raises(ModelConfigError, match="loopback"):
            await llm.complete(
                ModelRequest(
                    model="gpt-4.1-mini", messages=(ChatMessage(role="user", content="hi"),)
                )
            )
    finally:
        await llm.close()
