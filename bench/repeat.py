"""Run one benchmark several times in a row and say whether its lines hold.

`just bench repeat system --threads 300` runs `python -m bench.system --threads 300` three
times (`--times N` for another count), one after the other, each in a process of its own,
passing its output through. Then, for every `bench:` line, the values of the runs, the
spread (largest over smallest, less one) of `ours` and of the ratio, and whether both are
within `--within` (15 %): a figure that moves more than that from run to run says more
about the machine than about the code. Exits 1 when a run fails or a line does not hold.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass

from bench.common import print_load

LINE = re.compile(r"^bench: (\S+) ours=([0-9.]+) baseline=([0-9.]+) ratio=([0-9.]+)$")


@dataclass(frozen=True, slots=True)
class Figure:
    ours: float
    baseline: float
    ratio: float


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m bench.repeat", description=__doc__)
    parser.add_argument("name", help="the benchmark: agent, system, http, store, replay")
    parser.add_argument("--times", type=int, default=3, help="runs in a row (3)")
    parser.add_argument("--within", type=float, default=15.0, help="allowed spread in %% (15)")
    return parser.parse_known_args(argv)


def spread(values: list[float]) -> float:
    """Largest over smallest, less one, in percent (0 for fewer than two values or zeros)."""
    low, high = min(values), max(values)
    return (high / low - 1) * 100 if len(values) > 1 and low > 0 else 0.0


def run_once(name: str, rest: list[str]) -> list[tuple[str, Figure]]:
    """Run the benchmark, passing its output through; its `bench:` lines in order."""
    command = [sys.executable, "-m", f"bench.{name}", *rest]
    found: list[tuple[str, Figure]] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if match := LINE.match(line.strip()):
                metric, ours, baseline, ratio = match.groups()
                found.append((metric, Figure(float(ours), float(baseline), float(ratio))))
    if proc.returncode != 0:
        raise SystemExit(f"bench.{name} ended with exit code {proc.returncode}")
    return found


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(sys.argv[1:] if argv is None else argv)
    runs: dict[str, list[Figure]] = defaultdict(list)
    for index in range(args.times):
        print(f"== run {index + 1} of {args.times}: bench.{args.name} {' '.join(rest)}")
        for metric, figure in run_once(args.name, rest):
            runs[metric].append(figure)
    print(f"== {args.times} runs in a row of bench.{args.name}")
    print_load("at the end")
    held = True
    for metric, figures in runs.items():
        ours = spread([f.ours for f in figures])
        ratio = spread([f.ratio for f in figures])
        ok = len(figures) == args.times and ours <= args.within and ratio <= args.within
        held &= ok
        values = ", ".join(f"{f.ours:g}" for f in figures)
        ratios = ", ".join(f"{f.ratio:.3f}" for f in figures)
        print(f"  {metric}: ours {values} (spread {ours:.1f} %); ratio {ratios} "
              f"(spread {ratio:.1f} %): {'holds' if ok else 'does not hold'} "
              f"within {args.within:g} %")  # fmt: skip
    return 0 if held else 1


if __name__ == "__main__":
    raise SystemExit(main())
