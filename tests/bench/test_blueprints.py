"""`python -m bench.blueprints`: the agency's last blueprint saves timed against its first,
each window over HTTP, one `bench:` line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^bench: (\S+) ours=([0-9.]+) baseline=([0-9.]+) ratio=([0-9.]+)$", re.M)


@pytest.mark.timeout(180)
def test_the_benchmark_saves_every_blueprint_and_prints_the_last_window_against_the_first() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.blueprints", "--saves", "60", "--window", "10",
         "--names", "7", "--prompt-bytes", "100"],
        cwd=REPO, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = LINE.findall(done.stdout)
    assert [name for name, *_ in lines] == ["blueprint-save-60th"]
    _, ours, baseline, ratio = lines[0]
    assert float(ours) > 0 and float(baseline) > 0
    assert float(ratio) == pytest.approx(float(ours) / float(baseline), abs=0.002)
    assert "fill to 50: 40 saves" in done.stdout
