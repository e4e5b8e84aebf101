"""Supervision as `agency up` runs it: a failing service is restarted, the others go on, and
`/readyz` says which is down."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx

from agency.infra.retry import RetryPolicy
from agency.services.api.server import run_api
from agency.services.supervisor import Supervisor
from tests.api.conftest import Api
from tests.helpers import assert_eventually


async def test_a_service_that_crashes_twice_is_restarted_while_the_others_keep_running(
    api: Api,
) -> None:
    runs = {"flaky": 0, "steady": 0}

    async def flaky(stop: asyncio.Event) -> None:
        runs["flaky"] += 1
        if runs["flaky"] <= 2:
            raise RuntimeError(f"crash {runs['flaky']}")
        await stop.wait()

    async def steady(stop: asyncio.Event) -> None:
        runs["steady"] += 1
        await stop.wait()

    # 0.05 s before the first restart, 2 s before the second: long enough to be seen.
    policy = RetryPolicy(wait_initial=0.05, wait_exp_base=40.0, wait_max=2.0, wait_jitter=0.0)
    supervisor = Supervisor({"flaky": flaky, "steady": steady}, policy=policy)
    deps = dataclasses.replace(api.deps, services=supervisor.states)
    stop = asyncio.Event()
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    tasks = [
        asyncio.create_task(supervisor.run(stop)),
        asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, started.set_result)),
    ]
    try:
        url = await asyncio.wait_for(started, timeout=15)
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:

            async def restarting() -> None:
                r = await client.get("/readyz")
                assert r.status_code == 503
                body = r.json()
                assert body["services"] == {"flaky": "restarting", "steady": "running"}
                assert "service flaky is restarting" in body["error"]

            await assert_eventually(restarting, timeout=10, interval=0.02)

            async def recovered() -> None:
                r = await client.get("/readyz")
                assert r.status_code == 200
                assert r.json() == {
                    "status": "ready",
                    "services": {"flaky": "running", "steady": "running"},
                }

            await assert_eventually(recovered, timeout=15)
            assert (await client.get("/healthz")).status_code == 200
        assert runs == {"flaky": 3, "steady": 1}
        status = supervisor.statuses()["flaky"]
        assert status.restarts == 2 and status.last_error == "RuntimeError: crash 2"
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=20)
    assert supervisor.states() == {"flaky": "stopped", "steady": "stopped"}


async def test_a_service_that_returns_before_stop_is_restarted() -> None:
    runs: list[int] = []
    stop = asyncio.Event()

    async def quits(stop_: asyncio.Event) -> None:
        runs.append(1)
        if len(runs) == 3:
            stop.set()

    policy = RetryPolicy(wait_initial=0.01, wait_max=0.01, wait_jitter=0.0)
    supervisor = Supervisor({"quits": quits}, policy=policy)
    await asyncio.wait_for(supervisor.run(stop), timeout=10)
    assert len(runs) == 3
    status = supervisor.statuses()["quits"]
    assert status.state == "stopped" and status.restarts == 2
    assert status.last_error == "returned before it was told to stop"
