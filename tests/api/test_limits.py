"""Per-tenant invoke limits over HTTP: 429 with Retry-After, one tenant never another's."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from litestar.exceptions import HTTPException

from agency.contracts.events import AnyEvent, RunPaused, RunStarted
from agency.contracts.http import RunAccepted
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext
from agency.services.api.limits import InvokeLimiter
from agency.services.api.run_start import refuse_if_limited
from agency.services.tenancy.fairness import FairnessLimits
from tests.api.conftest import Api, Thread, create_tenant, create_thread, running_api
from tests.helpers import assert_eventually


async def test_invokes_beyond_the_rate_answer_429_with_retry_after_for_that_tenant_only(
    client: httpx.AsyncClient, api: Api, thread_a: Thread
) -> None:
    # One token per 100 s: the third invoke is refused however slowly the three are sent.
    limits = FairnessLimits(invokes_per_second=0.01, invoke_burst=2, max_active_runs=0)
    deps = replace(api.deps, limiter=InvokeLimiter(limits))
    thread_b = await create_thread(client, await create_tenant(client, api, "b"))
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:
        codes = [
            (await other.post(f"{thread_a.path}/invoke", json={}, headers=thread_a.tenant.auth))
            for _ in range(3)
        ]
        assert [r.status_code for r in codes] == [202, 202, 429]
        refused = codes[2]
        assert int(refused.headers["Retry-After"]) >= 1
        assert "per second per tenant" in refused.json()["error"]
        r = await other.post(f"{thread_b.path}/invoke", json={}, headers=thread_b.tenant.auth)
        assert r.status_code == 202


async def _stored(bus: Bus, thread: Thread, events: list[AnyEvent]) -> None:
    """`events` appended to the thread's log, as the runtime would have."""
    tenant = thread.tenant.id
    position = await bus.store.last_position(tenant, "thread", thread.thread_id)
    await bus.store.append(
        tenant, "thread", thread.thread_id, events, expected=position,
        context=EventContext(agency_id=thread.agency_id, thread_id=thread.thread_id),
    )  # fmt: skip


async def _refused_invoke(api: Api, thread: Thread, limits: FairnessLimits) -> httpx.Response:
    """The thread's invoke on an API with `limits`, once its door answers 429."""
    deps = replace(api.deps, limiter=InvokeLimiter(limits))
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:

        async def refused() -> httpx.Response:
            r = await other.post(f"{thread.path}/invoke", json={}, headers=thread.tenant.auth)
            assert r.status_code == 429, r.text
            return r

        return await assert_eventually(refused, timeout=10)


async def test_an_invoke_beyond_the_active_run_limit_answers_429(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    await _stored(
        bus, thread_a, [RunStarted(run_id="run_active1", agent_type="assistant", max_steps=5)]
    )
    limits = FairnessLimits(invokes_per_second=0, max_active_runs=1)
    r = await _refused_invoke(api, thread_a, limits)
    assert r.headers["Retry-After"] == "1" and "1 active runs" in r.json()["error"]


async def test_a_run_parked_on_an_approval_counts_against_the_parked_limit_not_the_active_one(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    await _stored(
        bus,
        thread_a,
        [
            RunStarted(run_id="run_parked1", agent_type="assistant", max_steps=5),
            RunPaused(run_id="run_parked1", reason="hitl"),
        ],
    )
    at_parked_limit = FairnessLimits(invokes_per_second=0, max_active_runs=1, max_parked_runs=1)
    r = await _refused_invoke(api, thread_a, at_parked_limit)
    said = r.json()["error"]
    assert "1 runs waiting on an answer" in said and "retry in 30 s" in said, said
    assert r.headers["Retry-After"] == "30"

    under = FairnessLimits(invokes_per_second=0, max_active_runs=1, max_parked_runs=2)
    deps = replace(api.deps, limiter=InvokeLimiter(under))
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:
        r = await other.post(f"{thread_a.path}/invoke", json={}, headers=thread_a.tenant.auth)
    assert r.status_code == 202, r.text


def test_a_run_the_runtime_refused_for_the_tenants_limits_answers_429_with_its_reason() -> None:
    """A door whose count lagged let the invoke through and the runtime refused it
    (`request.rejected`): the protocol routes answer as the door would, 429 with the
    runtime's reason and the seconds it says; any other refusal is theirs to word."""
    share = "tenant_share_exceeded: the server is at capacity …; retry in 4 s"
    for reason, retry_after in ((share, "4"), ("tenant_active_run_limit: …", "1")):
        with pytest.raises(HTTPException) as refused:
            refuse_if_limited(RunAccepted(run_id="r1", status="rejected", reason=reason))
        assert refused.value.status_code == 429 and refused.value.detail == reason
        assert refused.value.headers == {"Retry-After": retry_after}
    refuse_if_limited(RunAccepted(run_id="r2", status="rejected", reason="run r0 is active …"))
    refuse_if_limited(RunAccepted(run_id="r3", status="running"))
