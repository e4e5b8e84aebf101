"""`python -m bench.encryption`: `bench agent`'s sequential runs and `bench system`'s resume,
sealed against in clear in one run, each side checked to store its events as it says."""

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
        [sys.executable, "-m", "bench.encryption", *argv],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return {m[0]: (float(m[1]), float(m[2]), float(m[3])) for m in LINE.findall(done.stdout)}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_benchmark_compares_sealed_runs_and_resumes_with_clear_ones() -> None:
    lines = bench_lines(
        "--runs", "3", "--rounds", "1", "--resumes", "2", "--block", "1", timeout=290
    )
    assert set(lines) == {"encryption-sequential", "encryption-resume"}
    sealed, clear, ratio = lines["encryption-sequential"]
    assert sealed > 0 and clear > 0 and ratio == pytest.approx(sealed / clear, rel=0.02)
    sealed, clear, ratio = lines["encryption-resume"]
    assert sealed > 0 and clear > 0 and ratio == pytest.approx(clear / sealed, rel=0.02)
