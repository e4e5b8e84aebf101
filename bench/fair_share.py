"""Fair shares under overload: `just bench fair_share`.

`agency up` (every service, the API, NATS and PostgreSQL, as an operator would run them)
with a fake model that answers in 20 to 80 ms. Tenant A runs its usual load
(`bench/fair_share_load.py`: a thread, an invoke and the run followed to its end, a few at
once) on the idle system, then again while tenant B floods the API from a process of its
own. The line is A's p95 from invoke to run end, flooded (ours) against idle (baseline):

    bench: fair-share ours=<flooded p95 ms> baseline=<idle p95 ms> ratio=<flooded / idle>

and the API's resident memory before the flood, at its peak during it and once it has
ended (`bench: fair-share-rss ours=<after MB> baseline=<before MB>`, the peak printed
beside it). A's runs must all complete and none of its requests may be refused or answered
503: otherwise the benchmark fails (a `BenchError`), it never reports such a run.

Each phase prints the cores each part used: A's process (with the fake model), B's, and the
system's by process (`agency up`, each `agency serve` child by its service, nats-server,
PostgreSQL). `--processes` chooses `agency up`'s layout (`single`, `services`, ...).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections import Counter

import httpx
import psutil

from agency.services.llm.fake_server import FakeLLMServer
from bench.common import print_load, report
from bench.fair_share_load import CalmSummary, FloodSummary, calm, client, flooding, prepare
from bench.http_system import BenchError, RunningSystem

# After the flood, the API's memory is read every second for this long: the lowest figure
# is what it gave back.
SETTLE_SECONDS = 20


async def _tenant(url: str, admin: str, name: str) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post(
            "/tenants", json={"name": name}, headers={"Authorization": f"Bearer {admin}"}
        )
        r.raise_for_status()
        return str(r.json()["apiKey"])


def _checked(label: str, summary: CalmSummary, runs: int) -> None:
    print(
        f"  A {label}: {len(summary.latencies_ms)} runs, p95 {summary.p95():,.0f} ms "
        f"(the invoke's answer {summary.p95(summary.answers_ms):,.0f} ms); "
        f"answers {summary.statuses}",
        flush=True,
    )
    if summary.failed or len(summary.latencies_ms) != runs:
        raise BenchError(f"A's runs {label} did not all complete: {summary.failed[:5]}")
    if summary.count(503) or summary.count(429):
        raise BenchError(f"A's requests {label} were refused: {summary.statuses}")


async def bench(args: argparse.Namespace) -> None:
    async with (
        FakeLLMServer(instant=True, latency_ms=(20, 80)) as fake,
        RunningSystem(fake.base_url, _layout(args.processes)) as system,
    ):
        endpoints = system.endpoints
        assert endpoints is not None and endpoints.api_url and endpoints.admin_secret
        url = endpoints.api_url
        key_a = await _tenant(url, endpoints.admin_secret, "calm")
        key_b = await _tenant(url, endpoints.admin_secret, "flood")
        async with client(url, key_a, connections=16) as a, client(url, key_b, 4) as b:
            agency_a, agency_b = await prepare(a), await prepare(b)
            await calm(a, agency_a, args.at_once, args.at_once)  # warm up
            print_load("before the idle run")
            cpu = CpuWatch(system.pid)
            idle = await calm(a, agency_a, args.runs, args.at_once)
            cpu.phase("idle")
            _checked("idle", idle, args.runs)
            before = api_rss(system.pid)
            peak = before
            print_load("before the flood")
            async with flooding(
                url, key_b, agency_b, args.flood_seconds, args.workers, args.streams
            ) as flood_done:
                sampling = asyncio.create_task(_peak(system.pid, flood_done))
                cpu.phase("between")
                flooded = await calm(a, agency_a, args.runs, args.at_once)
                cpu.phase("flooded")
                if flood_done.done():
                    raise BenchError("the flood ended before A's load did: flood for longer")
                flood = await flood_done
                peak = await sampling
            _checked("flooded", flooded, args.runs)
            print(f"  B: {flood.statuses}", flush=True)
            if flood.retry_after_wrong:
                raise BenchError(f"429s without a matching Retry-After: {flood.examples}")
            after = await _settled(system.pid)
        print(f"  API RSS: before {before:,.0f} MB, peak {peak:,.0f} MB, after {after:,.0f} MB")
        report("fair-share", flooded.p95(), idle.p95(), " ms")
        report("fair-share-rss", after, before, " MB")


class CpuWatch:
    """Cores used in each phase by the system's processes (by kind: python, the NATS
    server, PostgreSQL), this process (tenant A and the fake model) and B's flood."""

    def __init__(self, system_pid: int) -> None:
        self._system = system_pid
        self._last = self._seconds()
        self._at = time.monotonic()

    def _seconds(self) -> Counter[str]:
        seconds: Counter[str] = Counter()
        me = psutil.Process()
        system = {p.pid for p in _tree(self._system)}
        for process in (me, *me.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                if process.pid == me.pid:
                    kind = "A and the model"
                elif process.pid not in system:
                    kind = "B"
                else:
                    kind = _system_kind(process)
                seconds[kind] += times.user + times.system
        return seconds

    def phase(self, label: str) -> None:
        now, seconds = time.monotonic(), self._seconds()
        wall = max(now - self._at, 1e-3)
        used = {kind: (seconds[kind] - self._last[kind]) / wall for kind in seconds}
        self._last, self._at = seconds, now
        cores = ", ".join(f"{kind} {value:.2f}" for kind, value in sorted(used.items()))
        print(f"  cores used {label} ({wall:.1f} s): {cores}", flush=True)


def _layout(processes: str) -> dict[str, str]:
    """The environment that gives `agency up` the layout asked for, or none."""
    return {"AGENCY_PROCESSES": processes} if processes else {}


def _system_kind(process: psutil.Process) -> str:
    """`agency up` for its own process (the API, and every service it runs in it), the
    service's name for an `agency serve` child, or the program's name (nats-server,
    postgres)."""
    name = process.name()
    if not (name.startswith("python") or name == "agency"):
        return name
    argv = process.cmdline()
    return argv[argv.index("serve") + 1] if "serve" in argv[:-1] else "agency up"


def _tree(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    return []


async def _peak(pid: int, done: asyncio.Future[FloodSummary]) -> float:
    peak = 0.0
    while not done.done():
        peak = max(peak, api_rss(pid))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(done), timeout=0.5)
    return peak


def api_rss(pid: int) -> float:
    """MB resident in the system's Python processes (the API with the services beside it,
    or each in its own), not NATS's nor PostgreSQL's."""
    total = 0
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        for process in (root, *root.children(recursive=True)):
            with contextlib.suppress(psutil.Error):
                name = process.name()
                if name.startswith("python") or name == "agency":
                    total += process.memory_info().rss
    return total / 2**20


async def _settled(pid: int) -> float:
    lowest = api_rss(pid)
    for _ in range(SETTLE_SECONDS):
        await asyncio.sleep(1)  # a reading a second, not a wait for anything
        lowest = min(lowest, api_rss(pid))
    return lowest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="A's runs in each phase")
    parser.add_argument("--at-once", type=int, default=3, help="A's runs at once")
    parser.add_argument("--flood-seconds", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=48, help="B's requests at once")
    parser.add_argument("--streams", type=int, default=24, help="B's streams held open")
    parser.add_argument(
        "--processes",
        default="",
        help="`agency up --processes` (auto, single, services, or services by name); "
        "by default what $AGENCY_PROCESSES or auto chooses",
    )
    try:
        asyncio.run(bench(parser.parse_args(argv)))
    except BenchError as e:
        print(f"fair-share benchmark failed: {e}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
