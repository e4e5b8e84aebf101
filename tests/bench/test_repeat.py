"""`just bench repeat`: a benchmark run several times in a row, each `bench:` line's values
and spread, and whether it holds within the allowed spread."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.repeat import spread

REPO = Path(__file__).resolve().parents[2]


def test_the_spread_is_the_largest_over_the_smallest() -> None:
    assert spread([10.0, 11.5, 10.5]) == pytest.approx(15.0)
    assert spread([3.0]) == 0.0
    assert spread([0.0, 0.0]) == 0.0


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("within", "code"), [("1000", 0), ("-1", 1)])
def test_a_benchmark_run_twice_in_a_row_says_whether_each_line_holds(
    within: str, code: int
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.repeat", "store", "--times", "2", "--within", within,
         "--events", "300", "--writers", "4"],
        cwd=REPO, capture_output=True, text=True, timeout=220,
    )  # fmt: skip
    assert done.returncode == code, done.stdout + done.stderr
    out = done.stdout
    assert out.count("== run ") == 2 and "== 2 runs in a row of bench.store" in out
    summary = out.split("== 2 runs in a row")[1]
    verdict = "holds within 1000 %" if code == 0 else "does not hold within -1 %"
    for metric in ("append", "project"):
        line = next(x for x in summary.splitlines() if x.strip().startswith(f"{metric}:"))
        assert line.count(",") >= 2 and verdict in line, line
