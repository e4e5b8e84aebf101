"""Retention across a restart: with every service a process of its own, a tenant's thread
falls past its retention while the process that sweeps (`agency serve webhooks`) is down;
once it is back the thread is deleted as a DELETE deletes it (410, gone from the listing),
while a fresh thread of the tenant and another tenant's thread stay (docs/data.md,
"Retention")."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agency.services.llm.fake_server import FakeLLMServer
from tests.faults.harness import Harness
from tests.helpers import assert_eventually, created_tenant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

ADMIN = "admin-" + secrets.token_urlsafe(12)
# Long enough for a thread made after the restart to be fresh when the old one goes.
RETENTION = 45.0
WORKERS = {
    "registry": 1,
    "runtime": 1,
    "tools": 1,
    "projector": 1,
    "gateway": 1,
    "api": 1,
    "webhooks": 1,
}


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(instant=True) as server:
        yield server


async def _thread(http: httpx.AsyncClient, agency: str) -> str:
    r = await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def _read(http: httpx.AsyncClient, agency: str, thread: str) -> httpx.Response:
    return await http.get(f"/agency/{agency}/agent/{thread}/state")


async def test_a_thread_past_its_retention_while_the_sweep_was_down_is_deleted_after(
    tmp_path: Path, llm: FakeLLMServer
) -> None:
    env = {"AGENCY_ADMIN_SECRET": ADMIN, "AGENCY_RETENTION_SWEEP_SECONDS": "1"}
    async with Harness(tmp_path / "system", llm.base_url, workers=WORKERS, env=env) as system:
        url = await system.api_url()
        async with httpx.AsyncClient(base_url=url, timeout=30) as anyone:

            async def api_up() -> None:
                try:
                    await anyone.get("/healthz")
                except httpx.TransportError as e:
                    raise AssertionError(f"the API is not up yet: {e}") from e

            await assert_eventually(api_up, timeout=120, interval=0.5)
            key_a, _, agency_a = await created_tenant(anyone, ADMIN, "kept-briefly", "a")
            key_b, _, agency_b = await created_tenant(anyone, ADMIN, "kept-always", "b")
        assert agency_a is not None and agency_b is not None
        auth_a = {"Authorization": f"Bearer {key_a}"}
        auth_b = {"Authorization": f"Bearer {key_b}"}
        async with (
            httpx.AsyncClient(base_url=url, timeout=30, headers=auth_a) as a,
            httpx.AsyncClient(base_url=url, timeout=30, headers=auth_b) as b,
        ):
            r = await a.put("/retention", json={"seconds": RETENTION})
            assert r.status_code == 200, r.text
            assert r.json()["effectiveSeconds"] == RETENTION
            old = await _thread(a, agency_a)
            other = await _thread(b, agency_b)
            loop = asyncio.get_running_loop()
            due = loop.time() + RETENTION

            await system.kill("webhooks-0")
            # Past its retention with nothing sweeping: still there until a sweep runs.
            while loop.time() < due + 2:
                assert (await _read(a, agency_a, old)).status_code == 200
                await asyncio.sleep(1.0)
            await system.restart("webhooks-0")
            fresh = await _thread(a, agency_a)

            async def old_gone() -> None:
                r = await _read(a, agency_a, old)
                assert r.status_code == 410, r.text
                assert r.json()["requestedBy"] == "retention"

            await assert_eventually(old_gone, timeout=120, interval=0.5)
            listed = [t["id"] for t in (await a.get(f"/agency/{agency_a}/agents")).json()]
            assert old not in listed and fresh in listed
            assert (await _read(a, agency_a, fresh)).status_code == 200
            assert (await _read(b, agency_b, other)).status_code == 200
        assert system.crash_report() == ""
