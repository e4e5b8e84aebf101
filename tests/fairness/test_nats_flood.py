"""Fair shares hold for commands sent over NATS: tenant B floods its command subjects with
its own credentials (as `agency tenants credentials` issues them), from a process of its
own, while tenant A runs its usual load over HTTP against a slow model (0.5 to 2 s an
answer). The services run as processes (tests/faults/harness.py).

None of A's runs fails and each ends; B's excess is refused early (the gateway's 429 with
`Retry-After` for its commands waiting, the runtime's `request.rejected` naming its share of
the runs in progress, or a command consumer's dead letter naming its share of what that
consumer holds), and once B stops, the commands it left waiting drain by themselves and A's
next runs complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sys
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from agency.infra.jetstream import dlq_admin
from agency.infra.jetstream.connection import Bus
from agency.services.gateway.backlog import CommandBacklog
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.tenancy.admission import AdmissionSettings
from bench.fair_share_load import calm, client, prepare
from tests.faults.harness import REPO, Harness
from tests.helpers import assert_eventually, created_tenant

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ADMIN = "admin-" + secrets.token_urlsafe(12)
WORKERS = {
    "registry": 1, "runtime": 1, "tools": 1, "subagents": 1, "projector": 1, "gateway": 1,
    "api": 1,
}  # fmt: skip
FLOOD_SECONDS = 90.0
FLOOD_WORKERS = 32
B_THREADS = 4
CALM_RUNS = 12
CALM_AT_ONCE = 3
REJECTED = "request.rejected"
# A's p95 from invoke to run end under the flood (its model takes 0.5 to 2 s a call).
P95_BOUND_MS = 15_000


@dataclass
class Flood:
    """B's flood running (`bench/nats_flood.py`); `stop` ends it, `done` is its summary."""

    process: asyncio.subprocess.Process
    done: asyncio.Future[dict[str, Any]]

    @property
    def running(self) -> bool:
        return self.process.returncode is None and not self.done.done()

    async def stop(self) -> dict[str, Any]:
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        return await self.done


@contextlib.asynccontextmanager
async def nats_flood(
    credentials: dict[str, Any], agency: str, threads: list[str]
) -> AsyncIterator[Flood]:
    """B's flood in a process of its own, for at most `FLOOD_SECONDS`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.nats_flood", "--servers", credentials["servers"],
        "--user", credentials["user"], "--password", credentials["password"],
        "--inbox-prefix", credentials["inboxPrefix"], "--tenant", credentials["tenantId"],
        "--agency", agency, "--threads", ",".join(threads), "--seconds", str(FLOOD_SECONDS),
        "--workers", str(FLOOD_WORKERS),
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip

    async def summary() -> dict[str, Any]:
        out, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"the flood exited {process.returncode}: {err.decode()[-2000:]}")
        parsed: dict[str, Any] = json.loads(out.splitlines()[-1])
        return parsed

    done = asyncio.ensure_future(asyncio.wait_for(summary(), timeout=FLOOD_SECONDS + 90))
    try:
        yield Flood(process, done)
    finally:
        if not done.done():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(BaseException):
                await done


async def waiting(bus: Bus) -> Counter[str]:
    """Commands each tenant has in the commands stream, not yet handled (as the gateway
    reads them: a run's watch, which waits its time on purpose, is not counted)."""
    backlog = CommandBacklog(AdmissionSettings())
    await backlog.read(bus.nc)
    return backlog.waiting


async def refusals(bus: Bus, tenant: str, threads: list[str]) -> Counter[str]:
    """How B's commands were refused on the log: `request.rejected` by the reason's kind."""
    seen: Counter[str] = Counter()
    for thread in threads:
        for event in await bus.store.read(tenant, "thread", thread):
            if event.type == REJECTED:
                reason = str(getattr(event.payload, "reason", ""))
                seen[reason.split(":", 1)[0]] += 1
    return seen


async def test_a_tenant_flooding_its_nats_commands_is_refused_early_and_the_other_runs_unharmed(
    tmp_path: Path,
) -> None:
    async with (
        FakeLLMServer(instant=True, latency_ms=(500, 2000)) as llm,
        Harness(
            tmp_path / "system", llm.base_url, workers=WORKERS,
            env={"AGENCY_ADMIN_SECRET": ADMIN},
        ) as system,
        Bus(system.nats_url, name="flood-observer") as bus,
    ):  # fmt: skip
        url = await system.api_url()
        async with httpx.AsyncClient(base_url=url, timeout=30) as admin:
            key_a, _, _ = await created_tenant(admin, ADMIN, "calm")
            key_b, tenant_b, _ = await created_tenant(admin, ADMIN, "flood")
            r = await admin.post(
                f"/tenants/{tenant_b}/nats-credentials",
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert r.status_code == 201, r.text
            credentials = r.json()
        async with client(url, key_a, connections=16) as a, client(url, key_b, 4) as b:
            agency_a, agency_b = await prepare(a), await prepare(b)
            threads_b = []
            for _ in range(B_THREADS):
                r = await b.post(f"/agency/{agency_b}/agents", json={"agentType": "fair"})
                assert r.status_code == 201, r.text
                threads_b.append(str(r.json()["id"]))
            idle = await calm(a, agency_a, CALM_AT_ONCE, CALM_AT_ONCE)
            assert idle.failed == [], idle.failed

            loop = asyncio.get_running_loop()
            async with nats_flood(credentials, agency_b, threads_b) as flood:

                async def flooding() -> None:
                    assert sum((await refusals(bus, tenant_b, threads_b)).values()) > 0

                await assert_eventually(flooding, timeout=60, interval=0.5)
                began = loop.time()
                mine = await calm(a, agency_a, CALM_RUNS, CALM_AT_ONCE)
                took = loop.time() - began
                assert flood.running, "the flood ended before A's load did"
                summary = await flood.stop()
            left = await waiting(bus)

            # Once B stops, what it left waiting drains by itself.
            async def drained() -> None:
                left = await waiting(bus)
                assert sum(left.values()) == 0, left

            stopped = loop.time()
            await assert_eventually(drained, timeout=60, interval=0.5)
            print(
                f"A: {mine.statuses}, p95 {mine.p95():.0f} ms, {took:.0f} s in all "
                f"(idle p95 {idle.p95():.0f} ms); B: {summary['answers']}; left when B "
                f"stopped: {left}, drained in {loop.time() - stopped:.0f} s"
            )
            after = await calm(a, agency_a, CALM_AT_ONCE, CALM_AT_ONCE)
            refused = await refusals(bus, tenant_b, threads_b)
            letters = await dlq_admin.list_letters(bus.js, tenant=tenant_b)
        crashes = system.crash_report()

    reasons = Counter(letter.reason for letter in letters)
    print(f"B refused on the log: {dict(refused)}; dead letters (first 50): {dict(reasons)}")
    assert mine.failed == [], mine.failed
    assert len(mine.latencies_ms) == CALM_RUNS
    assert mine.count(429) == 0 and mine.count(503) == 0, mine.statuses
    assert after.failed == [], after.failed
    answers = Counter(summary["answers"])
    assert summary["retry_after_wrong"] == 0, summary["examples"]
    assert not any(k.endswith(" 500") for k in answers), summary["examples"]
    # Refused before it was stored, for its commands waiting for the services; and by the
    # runtime (the runs in progress) or the command consumers (what they hold) beyond that.
    assert summary["refused_for"].get("commands waiting", 0) > 0, summary["refused_for"]
    assert refused["tenant_share_exceeded"] + len(letters) > 0, (refused, letters)
    # B's dead letters, if any, are commands refused unhandled for its share.
    assert {letter.reason for letter in letters} <= {"tenant_share_exceeded"}, letters[:3]
    # Before the shares of the commands waiting and held, B's backlog put A's p95 at 20 to
    # 39 s (idle: about 2 s); with them, about 6 s on a busy machine.
    assert mine.p95() < P95_BOUND_MS, (mine.p95(), idle.p95())
    assert crashes == ""
