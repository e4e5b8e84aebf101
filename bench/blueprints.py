"""Blueprint saves over HTTP: the agency's last saves against its first, in one run.

The API, the registry and the projector on embedded NATS and PostgreSQL. One agency:
`--window` saves over HTTP (`POST /agency/{id}/blueprints`, one at a time, each answered
once the read models show it: 201, or 202 past the route's wait, counted), then saves sent
as commands until the agency has `--saves` minus a window of them, then the last
`--window` over HTTP again. Each save names one of `--names` blueprints, with a prompt of
`--prompt-bytes`.

The baseline is the first window's rate; the ratio (last/first) is 1 where a save costs
the same whatever the agency holds, and falls as it grows where a save reads the agency's
history (10/s falling to 4.4/s by 605 blueprints, when it did).

Run: `just bench blueprints` (options: --saves N, --window N, --names N, --prompt-bytes N).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import uvloop

from agency.contracts.commands import SaveBlueprint
from agency.contracts.events import BlueprintSpec
from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.jetstream.streams import provision
from agency.projections.setup import prepare_read_models
from agency.services.agents.system import AgentSystem
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.logwait import watch_log
from agency.services.api.server import run_api
from agency.services.api.tenant_scope import scope_session
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig, run_stack
from bench.common import Stopwatch, embedded_servers, print_load, report

ADMIN = "bench-" + secrets.token_urlsafe(12)
# Sends of the fill in flight at once.
FILL_IN_FLIGHT = 32
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0


class BenchError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Window:
    rate: float
    p50_ms: float
    # Saves answered 202: stored, but not shown by the read models within the route's wait.
    accepted: int


@dataclass(frozen=True, slots=True)
class Agency:
    http: httpx.AsyncClient
    bus: Bus
    tenant: str
    agency: str
    names: int
    prompt: str

    def spec(self, i: int) -> BlueprintSpec:
        return BlueprintSpec(name=f"bp{i % self.names}", prompt=f"{i} {self.prompt}")


async def save_window(agency: Agency, first: int, count: int) -> Window:
    """`count` saves over HTTP, one at a time, each answered 201 (readable) or 202."""
    latencies: list[float] = []
    accepted = 0
    clock = Stopwatch()
    for i in range(first, first + count):
        spec = agency.spec(i)
        started = Stopwatch()
        r = await agency.http.post(
            f"/agency/{agency.agency}/blueprints", json={"name": spec.name, "prompt": spec.prompt}
        )
        if r.status_code not in (201, 202):
            raise BenchError(f"save {i} answered {r.status_code}: {r.text[:200]}")
        accepted += r.status_code == 202
        latencies.append(started.elapsed * 1000)
    return Window(count / clock.elapsed, statistics.median(latencies), accepted)


async def fill(agency: Agency, first: int, until: int, timeout: float) -> None:
    """Saves `first`..`until - 1` sent as registry commands, then waited for in the log."""
    slots = asyncio.Semaphore(FILL_IN_FLIGHT)

    async def send(i: int) -> None:
        async with slots:
            command = SaveBlueprint(agency_id=agency.agency, blueprint=agency.spec(i))
            await agency.bus.commands.send(agency.tenant, command)

    stored = [0]

    def all_stored(events: list[RecordedEvent]) -> bool | None:
        # The agency's log: its creation and one event per save.
        stored[0] += len(events)
        return True if stored[0] >= until + 1 else None

    bus = agency.bus
    async with watch_log(bus.nc, bus.store, agency.tenant, "agency", agency.agency) as log:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(send(i) for i in range(first, until)))
        if await log.until(all_stored, timeout) is None:
            raise BenchError(f"the fill was not stored within {timeout:.0f}s")


@asynccontextmanager
async def system(nats_url: str, database_url: str) -> AsyncIterator[str]:
    """The registry, the projector and the API; yields the API's URL."""
    pool = await create_pool(database_url, max_size=10, setup=scope_session)
    async with pool.acquire() as conn:
        await migrate(conn)
    await prepare_read_models(pool)
    provider = OpenAIProvider(base_url="http://127.0.0.1:9/v1", api_key="unused")
    config = StackConfig(
        nats_url=nats_url,
        database_url=database_url,
        system=AgentSystem().defaults(),
        provider=provider,
        services=("registry", "projector"),
    )
    stop = asyncio.Event()
    async with Bus(nats_url, name="bench-blueprints-api") as bus:
        await provision(bus.js)
        settings = ApiSettings(admin_secret=ADMIN)
        deps = ApiDeps(pool=pool, bus=bus, system=config.system, settings=settings)
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        tasks = [
            asyncio.create_task(run_stack(config, stop), name="stack"),
            asyncio.create_task(run_api(deps, "127.0.0.1", 0, stop, ready.set_result), name="api"),
        ]
        try:
            yield await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT)
        finally:
            stop.set()
            _, late = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
            for task in late:
                task.cancel()
            await provider.close()
            await asyncio.wait_for(pool.close(), timeout=10)


async def main(args: argparse.Namespace) -> None:
    if args.saves < 2 * args.window:
        raise BenchError("--saves must be at least twice --window")
    print(
        f"blueprint saves: {args.saves} in one agency, {args.names} names, prompts of "
        f"{args.prompt_bytes} bytes, windows of {args.window}",
        flush=True,
    )
    print_load("before")
    async with embedded_servers() as servers, system(servers.nats_url, servers.database_url) as url:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            r = await http.post("/tenants", json={"name": "bench"}, headers=admin)
            r.raise_for_status()
            tenant, key = r.json()["tenantId"], r.json()["apiKey"]
            http.headers["Authorization"] = f"Bearer {key}"
            r = await http.post("/agencies", json={"name": "bench"})
            r.raise_for_status()
            async with Bus(servers.nats_url, name="bench-blueprints-fill") as bus:
                agency = Agency(
                    http, bus, tenant, r.json()["id"], args.names, "p" * args.prompt_bytes
                )
                first = await save_window(agency, 0, args.window)
                print(
                    f"  saves 1-{args.window}: {first.rate:.1f}/s, p50 {first.p50_ms:.1f} ms, "
                    f"{first.accepted} answered 202"
                )
                last_from = args.saves - args.window
                clock = Stopwatch()
                await fill(agency, args.window, last_from, timeout=args.fill_timeout)
                filled = last_from - args.window
                print(f"  fill to {last_from}: {filled} saves in {clock.elapsed:.1f} s")
                last = await save_window(agency, last_from, args.window)
                print(
                    f"  saves {last_from + 1}-{args.saves}: {last.rate:.1f}/s, "
                    f"p50 {last.p50_ms:.1f} ms, {last.accepted} answered 202"
                )
    print_load("after")
    report(f"blueprint-save-{args.saves}th", last.rate, first.rate)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--names", type=int, default=1_000)
    parser.add_argument("--prompt-bytes", type=int, default=2_000)
    parser.add_argument("--fill-timeout", type=float, default=600.0)
    uvloop.run(main(parser.parse_args()))
