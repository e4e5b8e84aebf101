"""Appends by the events log's partition count, on the project's 3-node cluster.

Two loopback clusters of three nodes (`NatsCluster`, R3 streams, `sync_interval` from
`AGENCY_NATS_SYNC`, `always` by default) run side by side: one provisioned with one
partition, one with three (`docs/scaling.md`), its leaders spread over the nodes as
provisioning spreads them. The same workload runs on each, in alternating rounds so that
the machine's hiccups hit both alike; the medians are reported:

- `partitions-appends`: decisions stored per second, as the runtime stores them (the event
  store's `append` after the thread's expected sequence, a thread's appends of 1, 6 and 7
  events of a run's ordinary size), by `--writers` concurrent writers, each on threads of
  its own. Ours: three partitions; baseline: one; ratio ours/baseline.
- `partitions-runs` (with `--runs N`, N > 0): runs/s through the real services, each a
  process (`bench/partitions_runs.py`), N runs a side. Ours: three partitions and three
  runtime workers; baseline: one and one; one side after the other. With `--mixed`, three
  partitions with one runtime worker and one partition with three are measured between
  them and printed (not in the ratio).

Each stream's leader is printed from the server's stream info, with the decisions the
stream took and the CPU seconds every node spent, leader and followers apart: what a node
costs a decision as leader and as follower, from which the gain of three machines (a node
each) is predicted (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from agency.contracts.ids import new_id
from agency.contracts.partitions import EventLayout
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError, is_transient
from agency.infra.jetstream.leaders import leaders
from agency.infra.jetstream.records import Position
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.launch import NatsCluster
from agency.infra.launch.process import poll_until
from agency.services.observability.logging import configure_logging
from bench.common import Stopwatch, print_load, report
from bench.layouts import PARKED_APPENDS
from bench.store import message

NODES = 3
SETTLE_SECONDS = 60.0


@dataclass(slots=True)
class Cluster:
    """One provisioned cluster and what was measured on it."""

    cluster: NatsCluster
    bus: Bus
    placed: dict[str, str | None]
    rates: list[float] = field(default_factory=list)
    by_stream: Counter[str] = field(default_factory=Counter)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by node, measured
    decisions: int = 0
    refused: int = 0  # appends refused as concurrent and taken again
    elapsed: float = 0.0  # seconds measured
    writers_cpu: float = 0.0  # CPU seconds of the writers' process while measured

    @property
    def layout(self) -> EventLayout:
        return self.bus.layout


def cpu_seconds(cluster: NatsCluster) -> dict[str, float]:
    """Every node's CPU seconds so far (user and system)."""
    spent: dict[str, float] = {}
    for node in cluster.nodes:
        assert node.pid is not None
        times = psutil.Process(node.pid).cpu_times()
        spent[node.server_name or str(node.pid)] = times.user + times.system
    return spent


async def settled_leaders(bus: Bus) -> dict[str, str]:
    """Each events stream's leader once every stream has one, on a node of its own when
    there are as many partitions as nodes (provisioning moves a leader put beside another)."""

    async def placed() -> dict[str, str] | None:
        try:
            found = await leaders(bus.js, bus.layout)
        except Exception as e:
            if is_transient(e):
                return None
            raise
        named = {stream: node for stream, node in found.items() if node is not None}
        if len(named) < len(found):
            return None
        if len(found) == NODES and len(set(named.values())) < NODES:
            return None
        return named

    found = await poll_until(placed, timeout=SETTLE_SECONDS, interval=0.5)
    if found is None:
        raise RuntimeError(f"the events streams have no settled leaders after {SETTLE_SECONDS} s")
    return found


async def append_thread(bus: Bus, tenant: str, thread: str) -> int:
    """A thread's decisions: its appends of `PARKED_APPENDS` events after its sequence; how
    many were refused as concurrent and taken again from the stored position, as the
    runtime reloads and decides again (a commit retried after a timeout under load meets
    its own first attempt still in flight)."""
    position, at, refused = Position(), 0, 0
    for size in PARKED_APPENDS:
        batch = [message(i) for i in range(at, at + size)]
        while True:
            try:
                result = await bus.store.append(tenant, "thread", thread, batch, expected=position)
            except ConcurrencyError:
                refused += 1
                stored = await bus.store.last_position(tenant, "thread", thread)
                if stored.stream_seq == position.stream_seq:
                    continue  # not stored: the same decision again
                position = stored  # stored by the first attempt
                break
            position = result.position
            break
        at += size
    return refused


async def warm(bus: Bus, tenant: str) -> None:
    """A thread on every partition, retried while new leaders find their feet."""
    pending = set(range(bus.layout.partitions))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while pending:
        thread = new_id()
        if (partition := bus.layout.partition(thread)) not in pending:
            continue
        try:
            await append_thread(bus, tenant, thread)
        except Exception as e:
            if not is_transient(e) or loop.time() >= deadline:
                raise
            await asyncio.sleep(0.2)  # a leader election: try again shortly
            continue
        pending.discard(partition)


@asynccontextmanager
async def provisioned(root: Path, partitions: int, sync: str) -> AsyncIterator[Cluster]:
    async with NatsCluster(root, size=NODES, sync_interval=sync) as cluster:
        await cluster.wait_for_meta_leader()
        async with Bus(cluster.url, name="bench-provision") as admin:
            settings = StreamSettings(replicas=NODES, partitions=partitions)
            await provision(admin.js, settings, nc=admin.nc)
        async with Bus(cluster.url, name="bench-partitions") as bus:
            placed = await settled_leaders(bus)
            await warm(bus, "warm")
            yield Cluster(cluster, bus, dict(placed))


async def run_round(target: Cluster, decisions: int, writers: int) -> None:
    """`decisions` decisions by `writers` writers, a thread of `PARKED_APPENDS` at a time."""
    tenant = "bench" + new_id()[-8:].lower()
    threads = max(1, decisions // len(PARKED_APPENDS))
    queue = iter(range(threads))
    layout = target.layout

    async def writer() -> None:
        for _ in queue:
            thread = new_id()
            target.refused += await append_thread(target.bus, tenant, thread)
            target.by_stream[layout.stream_of(thread)] += len(PARKED_APPENDS)

    before, own = cpu_seconds(target.cluster), psutil.Process().cpu_times()
    clock = Stopwatch()
    await asyncio.gather(*(writer() for _ in range(min(writers, threads))))
    elapsed = clock.elapsed
    after = psutil.Process().cpu_times()
    target.writers_cpu += after.user + after.system - own.user - own.system
    target.elapsed += elapsed
    for node, spent in cpu_seconds(target.cluster).items():
        target.cpu[node] = target.cpu.get(node, 0.0) + spent - before[node]
    stored = threads * len(PARKED_APPENDS)
    target.decisions += stored
    target.rates.append(stored / elapsed)


def describe(name: str, target: Cluster) -> tuple[float, float]:
    """Print each stream's leader, share and every node's CPU; a node's CPU ms a decision
    as a leader and as a follower (the mean over nodes of each role)."""
    print(f"  {name}: {statistics.median(target.rates):,.0f} decisions/s "
          f"(rounds: {', '.join(f'{r:,.0f}' for r in target.rates)})", flush=True)  # fmt: skip
    for stream, node in target.placed.items():
        print(f"    {stream}: leader {node}, {target.by_stream[stream]:,} decisions", flush=True)
    nodes_cpu = sum(target.cpu.values())
    print(f"    cores busy: nodes {nodes_cpu / target.elapsed:.2f}, writers' process "
          f"{target.writers_cpu / target.elapsed:.2f}; {target.refused} appends refused "
          "as concurrent and taken again", flush=True)  # fmt: skip
    leader_ms: list[float] = []
    follower_ms: list[float] = []
    for node, spent in sorted(target.cpu.items()):
        led = sum(n for s, n in target.by_stream.items() if target.placed.get(s) == node)
        followed = target.decisions - led
        print(f"    node {node}: {spent:.2f} CPU s, leads {led:,}, follows {followed:,}",
              flush=True)  # fmt: skip
        if led and not followed:
            leader_ms.append(spent / led * 1000)
        elif followed and not led:
            follower_ms.append(spent / followed * 1000)
    leader = statistics.mean(leader_ms) if leader_ms else 0.0
    follower = statistics.mean(follower_ms) if follower_ms else 0.0
    return leader, follower


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.partitions", description=__doc__)
    parser.add_argument("--decisions", type=int, default=6_000, help="decisions a side (6,000)")
    parser.add_argument("--writers", type=int, default=24, help="concurrent writers (24)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (3)")
    parser.add_argument(
        "--runs", type=int, default=0, help="runs a side through the services (0: none)"
    )
    parser.add_argument(
        "--mixed",
        action="store_true",
        help="with --runs, also 3 partitions with 1 runtime worker and 1 with 3",
    )
    args = parser.parse_args(argv)
    configure_logging("json", level=40)
    sync = os.environ.get("AGENCY_NATS_SYNC", "always")
    print(f"partitions: {args.decisions:,} decisions a side in {args.rounds} rounds by "
          f"{args.writers} writers, threads of {'+'.join(map(str, PARKED_APPENDS))} events; "
          f"two {NODES}-node clusters, R{NODES}, nats sync_interval={sync}; "
          f"{os.cpu_count()} cores for all six nodes and the writers", flush=True)  # fmt: skip
    print_load("before")
    per_round = max(len(PARKED_APPENDS), args.decisions // args.rounds)
    with tempfile.TemporaryDirectory(prefix="agency-partitions-") as tmp:
        root = Path(tmp)
        async with (
            provisioned(root / "one", 1, sync) as one,
            provisioned(root / "three", NODES, sync) as three,
        ):
            for _ in range(args.rounds):
                for target in (one, three):
                    await run_round(target, per_round, args.writers)
    leader_one, follower_one = describe("1 partition", one)
    describe(f"{NODES} partitions", three)
    if leader_one and follower_one:
        # On machines of their own, one partition loads its leader's machine with every
        # decision; three load each machine with a third as leader, two thirds as follower.
        gain = NODES * leader_one / (leader_one + (NODES - 1) * follower_one)
        print(f"  a decision costs a leader {leader_one:.3f} CPU ms, a follower "
              f"{follower_one:.3f} CPU ms: on {NODES} machines, {NODES} partitions would "
              f"take up to {gain:.2f}x the appends of one", flush=True)  # fmt: skip
    report("partitions-appends", statistics.median(three.rates), statistics.median(one.rates))
    if args.runs > 0:
        await bench_runs(args.runs, args.mixed)
    print_load("after")


async def bench_runs(runs: int, mixed: bool) -> None:
    # Imported here: the services' harness is loaded only when runs are asked for.
    from bench.partitions_runs import measure

    shapes = [(1, 1), (NODES, NODES)]
    if mixed:
        shapes[1:1] = [(NODES, 1), (1, NODES)]
    sides = [await measure(p, w, runs) for p, w in shapes]
    for side in sides:
        leading = ", ".join(f"{s} {n}" for s, n in side.placed.items())
        print(f"  {side.partitions} partition(s), {side.runtime_workers} runtime worker(s): "
              f"{side.rate:,.1f} runs/s, {side.completed} completed; leaders {leading}",
              flush=True)  # fmt: skip
    report("partitions-runs", sides[-1].rate, sides[0].rate)


if __name__ == "__main__":
    asyncio.run(main())
