"""`python -m bench.cli`: the `agency` command's start-up timed against `python -c pass`,
one `bench:` line per command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^bench: (\S+) ours=([0-9.]+) baseline=([0-9.]+) ratio=([0-9.]+)$", re.M)


def bench_lines(*argv: str, timeout: float) -> dict[str, tuple[float, float, float]]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli", *argv],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return {m[0]: (float(m[1]), float(m[2]), float(m[3])) for m in LINE.findall(done.stdout)}


@pytest.mark.timeout(120)
def test_the_benchmark_times_help_and_a_command_against_no_system() -> None:
    lines = bench_lines("--runs", "1", "--no-system", timeout=110)
    assert set(lines) == {"cli-help", "cli-help-cpu", "cli-threads-ls", "cli-threads-ls-cpu"}
    for ours, baseline, ratio in lines.values():
        assert ours > 0 and baseline > 0 and ratio == pytest.approx(baseline / ours, rel=0.01)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_benchmark_times_a_command_against_a_running_system() -> None:
    lines = bench_lines("--runs", "1", timeout=290)
    assert set(lines) == {"cli-help", "cli-help-cpu", "cli-threads-ls", "cli-threads-ls-cpu"}
    assert all(ours > 0 for ours, _, _ in lines.values())


def test_a_run_count_below_one_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli", "--runs", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--runs must be 1 or more" in done.stderr
