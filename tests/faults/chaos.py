"""Chaos: the whole system as separate processes, parts SIGKILLed at random under a workload
of tools, HITL and subagents, then every promise checked: each run ends exactly once, each
tool call has one result, no thread has a gap, no service died on its own, and the read
models equal a rebuild from the log.

    python -m tests.faults.chaos --threads 50 --kills 30 --latency 500-2000 --workers runtime=3
    python -m tests.faults.chaos --cluster --kills 4        # a 3-node R3 cluster
    python -m tests.faults.chaos --cluster --partitions 3   # its log in 3 partitions
    python -m tests.faults.chaos --targets nats --down 3-6 --busy   # long broker outages

prints one summary line (`chaos: …`) and exits 1 if a promise was broken.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from agency.contracts.ids import new_id
from agency.contracts.partitions import checkpoint_name
from agency.infra.jetstream.connection import Bus
from agency.projections.catalog import ALL
from agency.projections.checksum import projection_checksum
from agency.projections.engine import CHECKPOINTS
from agency.projections.errors import ProjectionError
from agency.projections.rebuild import build_scratch, last_stream_seqs
from agency.services.cli.signals import dump_tasks
from agency.services.llm.fake_server import FakeLLMServer
from tests.faults.cpu_load import busy_cores
from tests.faults.harness import DEFAULT_WORKERS, Harness
from tests.faults.workload import Workload, across_outages, outcomes, violations


@dataclass(frozen=True)
class ChaosParams:
    threads: int = 10
    kills: int = 6
    latency_ms: tuple[int, int] = (200, 800)
    workers: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WORKERS))
    cluster: bool = False
    # The events log's partitions (`docs/scaling.md`).
    partitions: int = 1
    # What may be killed: "all", "servers" (NATS and PostgreSQL) or "nats" (nodes only).
    targets: str = "all"
    # Killed once each in any case (in a random place of the schedule); with a cluster,
    # "nats" means one node.
    always: tuple[str, ...] = ("nats", "postgres")
    seed: int | None = None
    settle_timeout: float = 180.0
    # Seconds a killed part stays down before it is started again.
    down: tuple[float, float] = (0.1, 1.5)
    # A competing busy process on every core for the whole run (`cpu_load.py`).
    busy: bool = False


@dataclass
class ChaosReport:
    params: ChaosParams
    seed: int
    killed: list[str]
    outcomes: Counter[str]
    violations: list[str]
    open_runs: str
    crashes: str
    read_models: list[str]
    seconds: float
    # Outages the services waited out, by how each wait ended (`infra/outage.py`).
    outage_waits: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not (self.violations or self.open_runs or self.crashes or self.read_models)

    def summary(self) -> str:
        p = self.params
        workers = ",".join(f"{k}:{v}" for k, v in p.workers.items() if v)
        kills = Counter(k.rsplit("-", 1)[0] if k[-1].isdigit() else k for k in self.killed)
        errors = sum(n for o, n in self.outcomes.items() if o.startswith("run.error"))
        return (
            f"chaos: {'ok' if self.ok else 'FAILED'} threads={p.threads} kills={len(self.killed)} "
            f"({', '.join(f'{k}x{n}' for k, n in sorted(kills.items()))}) "
            f"latency={p.latency_ms[0]}-{p.latency_ms[1]}ms workers={workers} "
            f"down={p.down[0]:g}-{p.down[1]:g}s busy={'yes' if p.busy else 'no'} "
            f"nats={'cluster-3-R3' if p.cluster else 'single'} partitions={p.partitions} "
            f"runs={sum(self.outcomes.values())} completed={self.outcomes['run.completed']} "
            f"errors={errors} violations={len(self.violations)} "
            f"open={'yes' if self.open_runs else 'no'} crashes={'yes' if self.crashes else 'no'} "
            f"read_models={'differ' if self.read_models else 'equal'} "
            f"outage_waits={','.join(f'{k}:{n}' for k, n in sorted(self.outage_waits.items())) or 0} "
            f"seconds={self.seconds:.0f} seed={self.seed}"
        )

    def details(self) -> str:
        parts = [self.summary(), f"killed in order: {self.killed}", f"outcomes: {self.outcomes}"]
        parts += self.violations[:20]
        parts += [self.open_runs, self.crashes[-4000:], *self.read_models]
        return "\n".join(p for p in parts if p)


def _choices(system: Harness, targets: str) -> list[str]:
    every = system.targets
    if targets == "nats":
        return [t for t in every if t.startswith("nats")]
    if targets == "servers":
        return [t for t in every if t.startswith("nats") or t == "postgres"]
    return every


async def read_models_differ(system: Harness, timeout: float = 60.0) -> list[str]:
    """Once the projector has caught up with the log, each projection's rows against a
    rebuild from sequence 1 into a scratch schema; the projections that differ."""
    async with Bus(system.nats_url, name="chaos-check") as bus:
        layout = bus.layout
        targets = await across_outages(lambda: last_stream_seqs(bus.js, layout))
        pool = await asyncpg.create_pool(system.database_url, min_size=1, max_size=2)
        assert pool is not None
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            # Each projection's checkpoint on each partition against that partition's end.
            names = [checkpoint_name(p.name, k) for p in ALL for k in targets]
            ends = [targets[k] for _ in ALL for k in targets]
            while True:
                behind = await pool.fetch(
                    f"SELECT c.name, c.stream_seq, w.seq FROM {CHECKPOINTS} c "
                    "JOIN unnest($1::text[], $2::bigint[]) AS w(name, seq) ON w.name = c.name "
                    "WHERE c.stream_seq < w.seq",
                    names,
                    ends,
                )
                if not behind:
                    break
                if loop.time() >= deadline:
                    return [f"projection {r['name']} stuck at {r['stream_seq']} of {r['seq']}"
                            for r in behind]  # fmt: skip
                await asyncio.sleep(0.5)
            differ = []
            async with pool.acquire() as conn:
                for projection in ALL:
                    scratch = f"chaos_{projection.name}"
                    try:
                        await build_scratch(
                            pool, bus.js, projection, scratch, until_seq=targets, layout=layout
                        )
                    except (asyncpg.PostgresError, ProjectionError) as e:
                        differ.append(
                            f"rebuild of {projection.name} failed: {type(e).__name__}: {e}"
                        )
                        continue
                    live = await projection_checksum(conn, projection)
                    fresh = await projection_checksum(conn, projection, scratch)
                    if live != fresh:
                        differ.append(f"read model {projection.name} differs from a rebuild")
            return differ
        finally:
            await pool.close()


def _schedule(rng: random.Random, choices: list[str], params: ChaosParams) -> list[str]:
    """What to kill, in order: the `always` targets and random ones, `kills` in all."""
    fixed = [
        rng.choice([c for c in choices if c.startswith("nats")]) if t == "nats" else t
        for t in params.always
        if t == "nats" or t in choices
    ][: params.kills]
    schedule = fixed + [rng.choice(choices) for _ in range(params.kills - len(fixed))]
    rng.shuffle(schedule)
    return schedule


async def run_chaos(root: Path, params: ChaosParams) -> ChaosReport:
    # `kill -USR1` on the chaos process logs what each of its tasks waits on.
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump_tasks)
    seed = params.seed if params.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    started = time.monotonic()
    killed: list[str] = []
    async with (
        busy_cores() if params.busy else contextlib.nullcontext(0),
        FakeLLMServer(instant=True, latency_ms=params.latency_ms) as llm,
        Harness(
            root,
            llm.base_url,
            workers=params.workers,
            cluster_size=3 if params.cluster else 0,
            partitions=params.partitions,
        ) as system,
        Bus(system.nats_url, name="chaos-workload") as bus,
    ):
        load = Workload(bus, llm, "tchaos" + new_id().lower(), threads=params.threads)
        await load.setup()
        await load.start()
        try:
            for target in _schedule(rng, _choices(system, params.targets), params):
                # The schedule of the chaos itself: random up and down times, not a wait for
                # anything to happen.
                await asyncio.sleep(rng.uniform(0.5, 2.0))
                await system.kill(target)
                killed.append(target)
                await asyncio.sleep(rng.uniform(*params.down))
                await system.restart(target)
            open_runs = ""
            try:
                histories = await load.settle(timeout=params.settle_timeout)
            except AssertionError as e:
                open_runs = str(e)
                histories = await load.trees()
        finally:
            await load.stop()
        differ = await read_models_differ(system) if not open_runs else []
        crashes = system.crash_report()
        outage_waits = await system.outage_waits()
    return ChaosReport(
        params=params,
        seed=seed,
        killed=killed,
        outcomes=outcomes(histories),
        violations=violations(histories),
        open_runs=open_runs,
        crashes=crashes,
        read_models=differ,
        seconds=time.monotonic() - started,
        outage_waits=outage_waits,
    )


def _workers(text: str) -> dict[str, int]:
    workers = dict(DEFAULT_WORKERS)
    for part in filter(None, text.split(",")):
        name, _, count = part.partition("=")
        if name not in workers:
            raise argparse.ArgumentTypeError(f"unknown service {name!r}")
        workers[name] = int(count)
    return workers


def _latency(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _seconds(text: str) -> tuple[float, float]:
    low, _, high = text.partition("-")
    return float(low), float(high or low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="just chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=30)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--latency", type=_latency, default=(500, 2000), help="ms, e.g. 500-2000")
    parser.add_argument("--workers", type=_workers, default=dict(DEFAULT_WORKERS),
                        help="per service, e.g. runtime=3,tools=2")  # fmt: skip
    parser.add_argument("--cluster", action="store_true", help="a 3-node cluster, R3 streams")
    parser.add_argument("--partitions", type=int, default=1,
                        help="the events log's partitions (AGENCY_EVENT_PARTITIONS)")  # fmt: skip
    parser.add_argument("--targets", choices=("all", "servers", "nats"), default="all")
    parser.add_argument("--down", type=_seconds, default=(0.1, 1.5),
                        help="seconds a killed part stays down, e.g. 3-6")  # fmt: skip
    parser.add_argument("--busy", action="store_true",
                        help="a competing busy process on every core")  # fmt: skip
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--settle", type=float, default=600.0, help="seconds for runs to end")
    args = parser.parse_args(argv)
    params = ChaosParams(
        threads=args.threads, kills=args.kills, latency_ms=args.latency, workers=args.workers,
        cluster=args.cluster, partitions=args.partitions, targets=args.targets, seed=args.seed,
        settle_timeout=args.settle,
        down=args.down, busy=args.busy,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="agency-chaos-") as root:
        report = asyncio.run(run_chaos(Path(root), params))
    print(report.details() if not report.ok else "", file=sys.stderr)
    print(report.summary(), flush=True)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
