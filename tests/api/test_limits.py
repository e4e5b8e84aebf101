"""Per-tenant invoke limits over HTTP: 429 with Retry-After, one tenant never another's."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import httpx
import pytest
from litestar.exceptions import HTTPException
from nats.js.errors import NotFoundError

from agency.contracts.commands import CommandEnvelope, InvokeThread
from agency.contracts.events import (
    AnyEvent,
    RequestAccepted,
    RequestRejected,
    RunPaused,
    RunStarted,
)
from agency.contracts.http import RunAccepted
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext
from agency.services.api.idempotency import run_id_for
from agency.services.api.limits import InvokeLimiter
from agency.services.api.run_start import refuse_if_limited
from agency.services.tenancy.fairness import ACTIVE_RUN_LIMIT, FairnessLimits
from tests.api.conftest import Api, Thread, create_tenant, create_thread, running_api
from tests.api.test_http import last_command
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
    api: Api, bus: Bus, client: httpx.AsyncClient, thread_a: Thread
) -> None:
    """At the parked limit, an invoke of another thread is refused; one to the thread whose
    run is parked goes to that run, parks nothing more, and is let through (as the
    runtime lets it)."""
    other_thread = await create_thread(client, thread_a.tenant)
    await _stored(
        bus,
        thread_a,
        [
            RunStarted(run_id="run_parked1", agent_type="assistant", max_steps=5),
            RunPaused(run_id="run_parked1", reason="hitl"),
        ],
    )
    at_parked_limit = FairnessLimits(invokes_per_second=0, max_active_runs=1, max_parked_runs=1)
    r = await _refused_invoke(api, other_thread, at_parked_limit)
    said = r.json()["error"]
    assert "1 runs waiting on an answer" in said and "retry in 30 s" in said, said
    assert r.headers["Retry-After"] == "30"
    deps = replace(api.deps, limiter=InvokeLimiter(at_parked_limit))
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:
        r = await other.post(f"{thread_a.path}/invoke", json={}, headers=thread_a.tenant.auth)
    assert r.status_code == 202, r.text

    under = FairnessLimits(invokes_per_second=0, max_active_runs=1, max_parked_runs=2)
    deps = replace(api.deps, limiter=InvokeLimiter(under))
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:
        path, auth = other_thread.path, other_thread.tenant.auth
        r = await other.post(f"{path}/invoke", json={}, headers=auth)
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


async def _decided(
    bus: Bus, thread: Thread, run_id: str, decision: Callable[[str], list[AnyEvent]]
) -> None:
    """As the runtime decides: the invoke of `run_id` read from the commands stream, and
    `decision(its idempotency key)` stored on the thread, caused by it."""
    tenant = thread.tenant.id

    async def sent() -> CommandEnvelope:
        try:
            command = await last_command(bus, tenant, "invoke")
        except NotFoundError:
            raise AssertionError("no invoke sent yet") from None
        assert isinstance(command.payload, InvokeThread)
        assert command.payload.run_id == run_id
        return command

    command = await assert_eventually(sent, timeout=10)
    assert command.idempotency_key is not None
    position = await bus.store.last_position(tenant, "thread", thread.thread_id)
    await bus.store.append(
        tenant, "thread", thread.thread_id, decision(command.idempotency_key),
        expected=position,
        context=EventContext(
            agency_id=thread.agency_id, thread_id=thread.thread_id,
            causation_id=command.command_id,
        ),
    )  # fmt: skip


async def test_a_key_the_runtime_refused_for_a_limit_starts_its_run_when_sent_again(
    api: Api, bus: Bus, thread_a: Thread
) -> None:
    """The door's count lagged and the runtime refused the run for the tenant's limits:
    429. The client comes back with the same key, as it was told to: that is an attempt
    of its own (`<key>#1`), not the old refusal again, and from then on the key answers
    that run."""
    tenant, thread_id = thread_a.tenant.id, thread_a.thread_id
    key = "retried-" + new_id()
    first, second = run_id_for(tenant, thread_id, key), run_id_for(tenant, thread_id, key + "#1")
    reason = f"{ACTIVE_RUN_LIMIT}: the tenant has 1 active runs, its limit is 1; retry in 2 s"
    waiting = replace(api.deps.settings, invoke_status_timeout=10.0)
    deps = replace(api.deps, settings=waiting)
    headers = {**thread_a.tenant.auth, "Idempotency-Key": key}
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=15) as other:

        async def invoke() -> httpx.Response:
            return await other.post(f"{thread_a.path}/invoke", json={}, headers=headers)

        refused = asyncio.create_task(invoke())
        await _decided(
            bus, thread_a, first,
            lambda k: [RequestRejected(run_id=first, idempotency_key=k, reason=reason)],
        )  # fmt: skip
        r = await refused
        assert r.status_code == 429, r.text
        assert r.json()["error"] == reason and r.headers["Retry-After"] == "2"

        retried = asyncio.create_task(invoke())
        await _decided(
            bus, thread_a, second,
            lambda k: [
                RequestAccepted(run_id=second, idempotency_key=k),
                RunStarted(run_id=second, agent_type="assistant", max_steps=5),
            ],
        )  # fmt: skip
        r = await retried
        assert r.status_code == 202, r.text
        assert (r.json()["runId"], r.json()["status"]) == (second, "running")

        r = await invoke()
        assert r.status_code == 202, r.text
        assert (r.json()["runId"], r.json()["status"]) == (second, "running")
