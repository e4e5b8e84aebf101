"""`python -m bench.cli`: how long the `agency` command takes to start and answer.

Each figure is the median in ms of `--runs` runs, each in a process of its own, against
`python -c pass` with the same interpreter as the baseline (what any Python command costs);
the ratio is baseline/ours, as for every time in `bench/` (below 1: ours is slower). Each
command has two lines: its wall time, and (`-cpu`) the CPU time its process used, which
other work on a busy machine changes less:

- `cli-help`: `agency --help`;
- `cli-threads-ls`: `agency threads ls` against a running `agency up` (started in a
  temporary data directory first, its model never called), or with `--no-system` against a
  data directory with no system, which the command reports at once (exit status 2).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.common import print_load

RUN_TIMEOUT = 60.0
# Where the system's model would be; `threads ls` never calls it.
NO_MODEL = "http://127.0.0.1:9/v1"


def agency_command() -> list[str]:
    """The installed `agency` script beside this interpreter, else the module."""
    script = Path(sys.executable).parent / "agency"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "agency.services.cli.main"]


@dataclass(frozen=True, slots=True)
class Times:
    """Medians in seconds: of the wall time, and of the CPU time the process used (user and
    system), which other work on the machine changes less."""

    wall: float
    cpu: float


def median_times(argv: Sequence[str], runs: int, expect: int = 0) -> Times:
    """The medians of `runs` runs of `argv`, each of which must exit with `expect`."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if done.returncode != expect:
            raise SystemExit(
                f"{' '.join(argv)} exited with {done.returncode}, not {expect}:\n{done.stderr}"
            )
    return Times(statistics.median(walls), statistics.median(cpus))


def line(metric: str, ours: float, baseline: float) -> None:
    """Times in ms; the ratio is baseline/ours."""
    ours, baseline = ours * 1000, baseline * 1000
    print(f"  {metric}: ours {ours:.0f} ms, baseline {baseline:.0f} ms", flush=True)
    ratio = baseline / ours if ours else 0.0
    print(f"bench: {metric} ours={ours:.1f} baseline={baseline:.1f} ratio={ratio:.3f}", flush=True)


def measure(metric: str, argv: Sequence[str], runs: int, baseline: Times, expect: int = 0) -> None:
    ours = median_times(argv, runs, expect)
    line(metric, ours.wall, baseline.wall)
    line(f"{metric}-cpu", ours.cpu, baseline.cpu)


async def threads_ls_against_a_system(agency: list[str], runs: int, baseline: Times) -> None:
    from bench.http_system import RunningSystem

    async with RunningSystem(NO_MODEL) as system:
        data_dir = str(system.data_dir)
        argv = [*agency, "threads", "ls", "--data-dir", data_dir]
        await asyncio.to_thread(measure, "cli-threads-ls", argv, runs, baseline)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__)
    parser.add_argument("--runs", type=int, default=7, help="runs of each command (7)")
    parser.add_argument(
        "--no-system",
        action="store_true",
        help="time `threads ls` against no system (it fails at once) instead of starting one",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    agency = agency_command()
    print(f"== bench.cli: median of {args.runs} runs; {' '.join(agency)}", flush=True)
    print_load("at the start")
    baseline = median_times([sys.executable, "-c", "pass"], args.runs)
    measure("cli-help", [*agency, "--help"], args.runs, baseline)
    if args.no_system:
        with tempfile.TemporaryDirectory(prefix="agency-bench-cli-") as empty:
            argv_ls = [*agency, "threads", "ls", "--data-dir", empty]
            measure("cli-threads-ls", argv_ls, args.runs, baseline, expect=2)
    else:
        asyncio.run(threads_ls_against_a_system(agency, args.runs, baseline))
    print_load("at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
