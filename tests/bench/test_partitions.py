"""`python -m bench.partitions`: the same appends on one and on three partitions of the
3-node cluster, each stream's leader named, and its `bench:` line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_tiny_run_prints_each_leader_and_its_bench_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.partitions", "--decisions", "60", "--writers", "4",
         "--rounds", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    placed = dict(re.findall(r"^    (AGENCY_EVENTS(?:_\d)?): leader (n\d),", out, re.MULTILINE))
    assert set(placed) == {"AGENCY_EVENTS", "AGENCY_EVENTS_0", "AGENCY_EVENTS_1", "AGENCY_EVENTS_2"}
    assert {placed[f"AGENCY_EVENTS_{p}"] for p in range(3)} == {"n1", "n2", "n3"}
    taken = re.findall(r"^    AGENCY_EVENTS_\d: leader n\d, (\d+) decisions", out, re.MULTILINE)
    assert sum(map(int, taken)) == 60
    found = re.search(
        r"^bench: partitions-appends ours=([\d.]+) baseline=([\d.]+) ratio=([\d.]+)$",
        out, re.MULTILINE,
    )  # fmt: skip
    assert found is not None, out
    ours, baseline, ratio = map(float, found.groups())
    assert ours > 0 and baseline > 0
    assert ratio == pytest.approx(ours / baseline, abs=0.01)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_runs_through_the_services_print_their_bench_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.partitions", "--decisions", "30", "--writers", "2",
         "--rounds", "1", "--runs", "6"],
        cwd=REPO, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "1 partition(s), 1 runtime worker(s):" in out and ", 6 completed;" in out
    sides = re.findall(r"^  (\d) partition\(s\), (\d) runtime worker\(s\): ", out, re.MULTILINE)
    assert sides == [("1", "1"), ("3", "3")]
    assert re.search(
        r"^bench: partitions-runs ours=[\d.]+ baseline=[\d.]+ ratio=", out, re.MULTILINE
    )
