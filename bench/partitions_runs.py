"""Runs through the real services by the events log's partition count, on the 3-node
cluster: the fault harness's system (`tests/faults/harness.py`: every service an `agency
serve` process of its own, R3 streams, the fake model over HTTP) with one partition and one
runtime worker, then with three partitions and three runtime workers.

Each side: `threads` threads of the harness's workload (a tool call, then the answer),
created beforehand; the clock runs from the first invoke to the last run's end, as the
threads' events tell (read until every run has ended). Admission is off: the workload is
one tenant's burst, which admission would answer with refusals once the system is full.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leaders import leaders
from agency.infra.keystore.operator import OPERATOR_KEY_VARIABLE
from agency.services.llm.fake_server import FakeLLMServer
from bench.common import Stopwatch
from tests.faults.harness import DEFAULT_WORKERS, Harness
from tests.faults.workload import Workload, outcomes

SETTLE_SECONDS = 600.0
# What is measured is how fast the log takes runs, not whom admission lets in: one tenant's
# burst of runs above the measured limit would be refused (`tenant_share_exceeded`).
NO_ADMISSION = {"AGENCY_ADMISSION_ENABLED": "false"}


@dataclass(frozen=True, slots=True)
class Runs:
    partitions: int
    runtime_workers: int
    rate: float  # runs a second
    completed: int
    placed: dict[str, str | None]


async def measure(partitions: int, runtime_workers: int, threads: int) -> Runs:
    """`threads` runs on a fresh system of `partitions` partitions and runtime workers."""
    workers = {**DEFAULT_WORKERS, "runtime": runtime_workers}
    # One operator key for this process and every service it starts, as a deployment sets it.
    os.environ.setdefault(OPERATOR_KEY_VARIABLE, "bench-" + secrets.token_urlsafe(24))
    with tempfile.TemporaryDirectory(prefix="agency-partitions-runs-") as tmp:
        async with (
            FakeLLMServer(instant=True) as llm,
            Harness(
                Path(tmp),
                llm.base_url,
                workers=workers,
                cluster_size=3,
                partitions=partitions,
                env=NO_ADMISSION,
            ) as system,
            Bus(system.nats_url, name="bench-runs") as bus,
        ):
            placed = await leaders(bus.js, bus.layout)
            load = Workload(bus, llm, "t" + new_id().lower(), threads=threads, kinds=("tools",))
            await load.setup()
            clock = Stopwatch()
            await load.start()
            try:
                histories = await load.settle(timeout=SETTLE_SECONDS)
            finally:
                await load.stop()
            elapsed = clock.elapsed
            if system.crashes:
                raise RuntimeError(f"a service crashed: {system.crash_report()}")
    completed = outcomes(histories)["run.completed"]
    if completed != threads:
        raise RuntimeError(f"{completed} of {threads} runs completed: {outcomes(histories)}")
    return Runs(partitions, runtime_workers, completed / elapsed, completed, placed)
