"""The schedule door over HTTP: a cron we do not accept is a 400, a well-formed one firing
more often than the operator lets a schedule fire is a 403 naming the limit."""

from __future__ import annotations

from dataclasses import replace

import httpx

from agency.services.tenancy.fairness import ScheduleLimits
from tests.api.conftest import Api, Tenant, create_agency, running_api


async def test_a_schedule_firing_faster_than_the_limit_is_forbidden_and_a_bad_cron_is_400(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant
) -> None:
    settings = replace(api.deps.settings, schedules=ScheduleLimits(min_interval=10.0))
    deps = replace(api.deps, settings=settings)
    agency_id = await create_agency(client, tenant_a)
    body = {"name": "often", "agent": "worker", "message": "tick"}
    path = f"/agency/{agency_id}/schedules"
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:
        fast = await other.post(path, json={**body, "cron": "* * * * * */5"}, headers=tenant_a.auth)
        bad = await other.post(path, json={**body, "cron": "* * * * mon"}, headers=tenant_a.auth)
    assert fast.status_code == 403, fast.text
    assert fast.json()["error"] == (
        "schedule_too_frequent: cron '* * * * * */5' fires every 5 s; a schedule may fire at "
        "most once every 10 s"
    )
    assert bad.status_code == 400 and "cron" in bad.json()["error"], bad.text
