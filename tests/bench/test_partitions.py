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
