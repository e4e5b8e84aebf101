"""The API's walls, tested over real HTTP as a hostile tenant would: no id the caller does
not own names an object (404), and no request, however malformed, answers 5xx."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers import assert_eventually
from tests.security.conftest import Tenant


def not_found(r: httpx.Response) -> None:
    assert r.status_code == 404, (r.request.method, r.request.url.path, r.status_code, r.text)
    assert r.json() == {"error": r.json()["error"], "status": 404}


async def a_schedule(http: httpx.AsyncClient, owner: Tenant) -> str:
    """A cron schedule of the owner's agency, once it is recorded."""
    body = {"name": "daily", "cron": "0 9 * * *", "message": "hi", "agent": "worker"}
    r = await http.post(f"/agency/{owner.agency}/schedules", json=body, headers=owner.auth)
    assert r.status_code == 202, r.text
    schedule = str(r.json()["id"])

    async def listed() -> None:
        r = await http.get(f"/agency/{owner.agency}/schedules", headers=owner.auth)
        assert schedule in [s["id"] for s in r.json()], r.text

    await assert_eventually(listed, timeout=15)
    return schedule


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        pytest.param("GET", "", None, id="workflow"),
        pytest.param("GET", "/channel", None, id="channel"),
        pytest.param("GET", "/documents", None, id="documents"),
        pytest.param("GET", "/proposals", None, id="proposals"),
        pytest.param("GET", "/inbox/worker", None, id="inbox"),
        pytest.param("POST", "/stop", {}, id="stop"),
        pytest.param("POST", "/messages", {"content": "hello"}, id="post"),
        pytest.param("POST", "/messages", {"content": "hi", "to": ["worker"]}, id="post-to"),
    ],
)
async def test_the_global_workflow_of_another_tenants_agency_is_not_found(
    http: httpx.AsyncClient,
    tenant_a: Tenant,
    tenant_b: Tenant,
    method: str,
    suffix: str,
    body: dict[str, Any] | None,
) -> None:
    path = f"/agency/{tenant_a.agency}/workflows/global{suffix}"
    not_found(await http.request(method, path, json=body, headers=tenant_b.auth))
    # An agency nobody has is not found either; the caller's own `@global` reads.
    not_found(await http.get("/agency/nosuchagency/workflows/global", headers=tenant_b.auth))
    own = await http.get(f"/agency/{tenant_b.agency}/workflows/global", headers=tenant_b.auth)
    assert own.status_code in (200, 404), own.text  # 404 until it has a member: no read row


async def test_the_callers_own_global_channel_reads_before_first_use(
    http: httpx.AsyncClient, tenant_b: Tenant
) -> None:
    r = await http.get(f"/agency/{tenant_b.agency}/workflows/global/channel", headers=tenant_b.auth)
    assert r.status_code == 200, r.text
    assert r.json()["messages"] == []


async def test_removing_a_schedule_the_agency_does_not_have_is_not_found(
    http: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    schedule = await a_schedule(http, tenant_a)
    for agency in (tenant_b.agency, tenant_a.agency):
        r = await http.post(f"/agency/{agency}/schedules/{schedule}/remove", headers=tenant_b.auth)
        not_found(r)
    r = await http.post(
        f"/agency/{tenant_b.agency}/schedules/sch_nosuchschedule/remove", headers=tenant_b.auth
    )
    not_found(r)
    # The owner removes it.
    r = await http.post(
        f"/agency/{tenant_a.agency}/schedules/{schedule}/remove", headers=tenant_a.auth
    )
    assert r.status_code == 202, r.text


async def test_a_schedule_of_another_agency_of_the_same_tenant_is_not_found(
    http: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    schedule = await a_schedule(http, tenant_a)
    r = await http.post("/agencies", json={"name": "other"}, headers=tenant_a.auth)
    other = r.json()["id"]
    r = await http.post(f"/agency/{other}/schedules/{schedule}/remove", headers=tenant_a.auth)
    not_found(r)


async def test_a_langgraph_thread_awaiting_its_first_run_is_its_tenants_only(
    http: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    r = await http.post("/langgraph/threads", json={}, headers=tenant_a.auth)
    assert r.status_code == 200, r.text
    thread = r.json()["thread_id"]
    r = await http.get(f"/langgraph/threads/{thread}", headers=tenant_a.auth)
    assert r.status_code == 200 and r.json()["status"] == "idle", r.text
    for path in ("", "/state"):
        not_found(await http.get(f"/langgraph/threads/{thread}{path}", headers=tenant_b.auth))
    r = await http.post(f"/langgraph/threads/{thread}/history", json={}, headers=tenant_b.auth)
    not_found(r)
    run = {"assistant_id": "worker", "input": {"messages": [{"role": "user", "content": "hi"}]}}
    r = await http.post(f"/langgraph/threads/{thread}/runs", json=run, headers=tenant_b.auth)
    not_found(r)


async def test_a_langgraph_thread_create_naming_another_tenants_agency_is_not_found(
    http: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    headers = {**tenant_b.auth, "x-agency-id": tenant_a.agency}
    not_found(await http.post("/langgraph/threads", json={}, headers=headers))
