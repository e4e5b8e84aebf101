"""A deletion by scope (an agency, an end user, a tenant) whose carriers are SIGKILLed mid-way is
finished when they come back: every thread answers 410, each tombstone and the record of
the deletion are written once, and a tenant's NATS user is removed (docs/data.md)."""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from pathlib import Path
from typing import Literal

import httpx
import pytest
from nats.aio.msg import Msg

from agency.contracts.events import (
    AgencyDeleted,
    EndUserForgetRequested,
    EndUserForgotten,
    TenantDeleted,
)
from agency.contracts.subjects import EVENT_TYPE_HEADER, aggregate_events_filter
from agency.infra.jetstream.connection import Bus
from agency.infra.nats_auth import CredentialIssuer, NatsAuth
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.test_tenant_deletion import nats_user_accepted
from tests.faults.harness import Harness
from tests.helpers import assert_eventually, created_tenant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

THREADS = 40
END_USER = "ann@example.com"
# The API process carries out the deletion it records; the webhooks service's `erasures`
# consumer carries out every one recorded. Both die mid-way.
CARRIERS = ("api-0", "webhooks-0")
WORKERS = {"registry": 1, "projector": 1, "api": 1, "webhooks": 1}
ADMIN = "admin-" + secrets.token_urlsafe(12)
Scope = Literal["agency", "end_user", "tenant"]


async def api_up(http: httpx.AsyncClient) -> None:
    try:
        r = await http.get("/healthz")
    except httpx.TransportError as e:
        raise AssertionError(f"the API is not up: {e!r}") from e
    assert r.status_code == 200, r.text


async def user_thread(http: httpx.AsyncClient, agency: str) -> str:
    r = await http.post(
        f"/agency/{agency}/agents", json={"agentType": "worker", "endUserId": END_USER}
    )
    assert r.status_code in (201, 202), r.text
    return str(r.json()["id"])


async def tombstones(bus: Bus, tenant: str, threads: list[str]) -> Counter[str]:
    """How many `thread.deleted` each thread holds."""
    counts: Counter[str] = Counter()
    for thread in threads:
        events = await bus.store.read(tenant, "thread", thread)
        counts[thread] = [e.type for e in events].count("thread.deleted")
    return counts


@pytest.mark.parametrize("scope", ["agency", "end_user", "tenant"])
async def test_a_deletion_killed_mid_way_is_finished_on_restart(
    tmp_path: Path, scope: Scope
) -> None:
    async with (
        FakeLLMServer(instant=True) as llm,
        Harness(
            tmp_path / "system",
            llm.base_url,
            workers=WORKERS,
            env={"AGENCY_ADMIN_SECRET": ADMIN},
        ) as system,
        Bus(system.nats_url, name="erasure-kill") as bus,
        httpx.AsyncClient(base_url=await system.api_url(), timeout=30) as http,
    ):
        await assert_eventually(lambda: api_up(http), timeout=60, interval=0.25)
        key, tenant, agency = await created_tenant(http, ADMIN, "erasure", "doomed")
        assert agency is not None
        http.headers["Authorization"] = f"Bearer {key}"
        threads = [await user_thread(http, agency) for _ in range(THREADS)]
        users = CredentialIssuer(NatsAuth(Path(system.nats_auth_dir)), system.nats_url)
        issued = await users.issue(tenant) if scope == "tenant" else None

        first_tombstone = asyncio.Event()

        async def seen(msg: Msg) -> None:
            if (msg.headers or {}).get(EVENT_TYPE_HEADER) == "thread.deleted":
                first_tombstone.set()

        await bus.nc.subscribe(aggregate_events_filter("thread", tenant), cb=seen)
        await bus.nc.flush(timeout=10)
        if scope == "agency":
            asked = http.delete(f"/agencies/{agency}")
        elif scope == "tenant":
            admin = {"Authorization": f"Bearer {ADMIN}"}
            asked = http.delete(f"/tenants/{tenant}", headers=admin)
        else:
            asked = http.post(f"/users/{END_USER}/forget")
        answer = asyncio.create_task(asked)
        await asyncio.wait_for(first_tombstone.wait(), timeout=60)
        await asyncio.gather(*(system.kill(carrier) for carrier in CARRIERS))
        with pytest.raises(httpx.TransportError):
            await answer  # the API died before it answered
        at_kill = await tombstones(bus, tenant, threads)
        assert 0 < sum(at_kill.values()) < THREADS, at_kill  # killed mid-way

        for carrier in CARRIERS:
            await system.restart(carrier)
        http.base_url = httpx.URL(await system.api_url())
        await assert_eventually(lambda: api_up(http), timeout=60, interval=0.25)

        async def all_gone() -> None:
            if scope == "tenant":  # its key is refused: the log shows the deletion
                events = await bus.store.read(tenant, "tenant", tenant)
                assert [type(e.payload) for e in events].count(TenantDeleted) == 1
                assert isinstance(events[-1].payload, TenantDeleted)
                assert (await http.get("/agencies")).status_code == 401
                assert set((await tombstones(bus, tenant, threads)).values()) == {1}
                # Finished by the `erasures` consumer: its NATS user is gone all the same.
                assert issued is not None and not await nats_user_accepted(issued)
                return
            for thread in threads:
                r = await http.get(f"/langgraph/threads/{thread}")
                assert r.status_code == 410, (thread, r.status_code, r.text)

        await assert_eventually(all_gone, timeout=120, interval=0.5)

        async def recorded_done() -> list[tuple[str, ...]]:
            if scope in ("agency", "tenant"):
                events = await bus.store.read(tenant, "agency", agency)
                done = [e.payload.threads for e in events if isinstance(e.payload, AgencyDeleted)]
            else:
                events = await bus.store.read(tenant, "tenant", tenant)
                requests = [e for e in events if isinstance(e.payload, EndUserForgetRequested)]
                assert len(requests) == 1
                done = [
                    e.payload.threads for e in events if isinstance(e.payload, EndUserForgotten)
                ]
            assert done, "the deletion is not recorded done yet"
            return done

        done = await assert_eventually(recorded_done, timeout=60, interval=0.25)
        assert len(done) == 1 and sorted(done[0]) == sorted(threads)
        assert set((await tombstones(bus, tenant, threads)).values()) == {1}
        crashes = system.crash_report()
    assert crashes == ""
