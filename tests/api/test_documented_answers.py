"""Answers as the OpenAPI document states them, for the cases a fuzzer meets by chance."""

from __future__ import annotations

import httpx

from tests.api.conftest import Api, Tenant, create_agency
from tests.api.test_keys import new_key


async def test_revoking_a_key_answers_204_without_a_body(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    key_id, _ = await new_key(client, tenant_a, "spare")
    r = await client.delete(f"/keys/{key_id}", headers=tenant_a.auth)
    assert r.status_code == 204, r.text
    assert r.content == b"" and "content-type" not in r.headers


async def test_a_bad_query_value_is_named_by_its_http_name(
    client: httpx.AsyncClient, api: Api
) -> None:
    r = await client.get("/dlq", params={"fromSeq": "0"}, headers=api.admin)
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("query parameter 'fromSeq': ")


async def test_run_without_agency_conflicts_when_the_tenant_has_several(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    body = {"agent": "assistant", "message": "hi"}
    r = await client.post("/serve", json=body, headers=tenant_a.auth)
    assert r.status_code == 404 and "no agency yet" in r.json()["error"], r.text
    first = await create_agency(client, tenant_a)
    second = await create_agency(client, tenant_a)
    r = await client.post("/serve", json=body, headers=tenant_a.auth)
    assert r.status_code == 409, r.text
    assert "name the `agency`" in r.json()["error"] and first in r.json()["error"]
    r = await client.post(
        "/serve", json={**body, "agent": "nobody", "agency": second}, headers=tenant_a.auth
    )
    assert r.status_code == 404 and "no agent 'nobody'" in r.json()["error"], r.text


async def test_workflow_references_are_checked_against_their_pattern(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency = await create_agency(client, tenant_a)
    base = f"/agency/{agency}/workflows"
    for bad in ("a b", "a:", "wf_x:y:z", "@"):
        r = await client.get(f"{base}/{bad}/channel", headers=tenant_a.auth)
        assert r.status_code == 400 and "is not a workflow" in r.json()["error"], (bad, r.text)
    r = await client.get(f"{base}/wf_nothing/channel", headers=tenant_a.auth)
    assert r.status_code == 404, r.text
    r = await client.get(f"{base}/@global/channel", headers=tenant_a.auth)
    assert r.status_code == 200 and r.json()["messages"] == [], r.text
    r = await client.post(
        f"{base}/global/messages", json={"content": "hi", "to": ["nobody"]}, headers=tenant_a.auth
    )
    assert r.status_code == 404 and "no agent 'nobody'" in r.json()["error"], r.text
