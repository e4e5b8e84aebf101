"""A tenant's hot `@global` workflow does not stall another tenant's workflow, and the
workflows consumer's backlog drains by itself once the load is gone, across a restart.

The services run as processes (tests/faults/harness.py), the API in this process. Tenant B
has five schedules firing every second on its `@global` agent (the limits are set to allow
it: `AGENCY_SCHEDULE_MIN_INTERVAL=1`, a fire rate above five a second) and a burst of
channel posts; tenant A runs a two-member workflow meanwhile, which must finish within a
few times what it takes on an idle system.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.db import create_pool
from agency.infra.jetstream.connection import Bus
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.server import run_api
from agency.services.api.tenant_scope import scope_session
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.tenancy.fairness import ScheduleLimits
from tests.faults.harness import Harness
from tests.helpers import assert_eventually, created_tenant
from tests.runtime.conftest import make_system

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ADMIN = "admin-" + secrets.token_urlsafe(12)
WORKERS = {"registry": 1, "runtime": 1, "tools": 1, "workflows": 1, "projector": 1}
# As fast as the limits allow here: five schedules of one tenant, each every second.
LIMITS = ScheduleLimits(min_interval=1.0, max_per_tenant=20, fires_per_minute=600.0)
LIMITS_ENV = {
    "AGENCY_SCHEDULE_MIN_INTERVAL": "1",
    "AGENCY_TENANT_MAX_SCHEDULES": "20",
    "AGENCY_TENANT_SCHEDULE_FIRES_PER_MINUTE": "600",
}
SCHEDULES = 5
POSTS = 150
# A's workflow under B's load may take this many times its idle time (a shared machine).
SLOWDOWN = 5.0
DEFINITION = """
name: review
agents:
  writer: worker
  reviewer: worker
"""


@asynccontextmanager
async def api(system: Harness) -> AsyncIterator[str]:
    """The API over the harness's NATS and PostgreSQL, in this process; yields its URL."""
    pool = await create_pool(system.database_url, max_size=10, setup=scope_session)
    bus = await Bus(system.nats_url, name="fairness-api").connect()
    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    settings = ApiSettings(admin_secret=ADMIN, schedules=LIMITS)
    deps = ApiDeps(pool=pool, bus=bus, system=make_system(), settings=settings)
    task = asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, ready.set_result))
    try:
        yield await asyncio.wait_for(asyncio.shield(ready), timeout=30)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        await bus.close()
        await asyncio.wait_for(pool.close(), timeout=10)


async def tenant_client(url: str, name: str) -> tuple[httpx.AsyncClient, str]:
    """A client of a new tenant with one agency, and the agency's id."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as admin:
        key, _, agency = await created_tenant(admin, ADMIN, name, name)
    assert agency is not None
    http = httpx.AsyncClient(base_url=url, timeout=120, headers={"Authorization": f"Bearer {key}"})
    return http, agency


async def review(http: httpx.AsyncClient, llm: FakeLLMServer, tag: str) -> float:
    """Run A's two-member workflow (writer, then reviewer) to its answer; seconds taken."""
    key = f"fair-{tag}-{secrets.token_hex(4)}"
    llm.script(f"write about {key}", [ScriptStep(content=f"Done. @reviewer check {key}")])
    llm.script(f"check {key}", [ScriptStep(content=f"Approved {key}.")])
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await http.post(
        "/serve",
        json={"workflow": "review", "tag": tag, "message": f"@writer write about {key}",
              "timeoutSeconds": 90},
    )  # fmt: skip
    took = loop.time() - started
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "settled" and body["content"] == f"Approved {key}.", body
    return took


async def backlog(bus: Bus) -> int:
    """Events the workflows consumer has not yet settled: waiting plus in hand."""
    info = await bus.js.consumer_info(EVENTS_STREAM, "workflows")
    return int(info.num_pending or 0) + int(info.num_ack_pending or 0)


def bound(idle: float) -> float:
    """How long A's workflow may take under load: `SLOWDOWN` times idle, and never less
    than a few seconds (an idle run of half a second is within a busy machine's noise)."""
    return max(SLOWDOWN * idle, 5.0)


async def drained(bus: Bus, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    seen: list[int] = []
    while True:
        left = await backlog(bus)
        seen.append(left)
        if left == 0:
            return
        assert loop.time() < deadline, f"the workflows backlog did not drain: {seen[-10:]}"
        await asyncio.sleep(0.5)


async def test_a_hot_global_workflow_neither_stalls_another_tenant_nor_outlives_its_load(
    tmp_path: Path,
) -> None:
    async with (
        FakeLLMServer(instant=True) as llm,
        Harness(tmp_path / "system", llm.base_url, workers=WORKERS, env=LIMITS_ENV) as system,
        Bus(system.nats_url, name="fairness-observer") as bus,
        api(system) as url,
    ):
        a, a_agency = await tenant_client(url, "a")
        b, b_agency = await tenant_client(url, "b")
        try:
            for tag in ("idle", "loaded", "after"):
                r = await a.post(
                    f"/agency/{a_agency}/workflows", json={"definition": DEFINITION, "tag": tag}
                )
                assert r.status_code == 201, r.text
            idle = await review(a, llm, "idle")

            schedules = []
            for n in range(SCHEDULES):
                r = await b.post(
                    f"/agency/{b_agency}/schedules",
                    json={"name": f"hot-{n}", "cron": "* * * * * *", "agent": "worker",
                          "message": f"@worker tick {n}"},
                )  # fmt: skip
                assert r.status_code == 202, r.text
                schedules.append(r.json()["id"])

            async def flood() -> None:
                for n in range(POSTS):
                    r = await b.post(
                        f"/agency/{b_agency}/workflows/global/messages",
                        json={"content": f"note {n} for the hot channel"},
                    )
                    assert r.status_code in (200, 201, 202), r.text

            flooding = asyncio.create_task(flood())

            async def firing() -> None:
                r = await b.get(f"/agency/{b_agency}/schedules")
                assert r.status_code == 200, r.text
                assert sum(s["fired"] for s in r.json()) >= 3 * SCHEDULES

            # A starts once B's schedules have been firing a while.
            await assert_eventually(firing, timeout=60, interval=0.25)
            loaded = await review(a, llm, "loaded")
            assert loaded < bound(idle), (idle, loaded)

            # A restart of the workflows service in the midst of the load starts from the
            # durable, as it is, and works its way through.
            workflows = system.service("workflows-0")
            await workflows.stop()
            await workflows.start()
            assert await system.connected(timeout=120) == []
            for schedule in schedules:
                r = await b.post(f"/agency/{b_agency}/schedules/{schedule}/remove")
                assert r.status_code == 202, r.text
            await asyncio.wait_for(flooding, timeout=120)
            await drained(bus, timeout=120)
            after = await review(a, llm, "after")
            assert after < bound(idle), (idle, after)
        finally:
            await a.aclose()
            await b.aclose()
        crashes = system.crash_report()
    assert crashes == ""
