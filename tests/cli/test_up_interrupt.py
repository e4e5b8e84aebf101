"""Ctrl-C of `agency up` (SIGINT to its whole process group, as a terminal sends it) stops it
cleanly: exit status 0, and no warning or error on its way down, run directly or as
`./run up`."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from tests.cli.test_up_processes import REPO, _fresh_database
from tests.helpers import printed_until_ready

LAUNCHERS = {
    "agency": [str(REPO / ".venv" / "bin" / "agency"), "up"],
    "run": [str(REPO / "run"), "up"],
}


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
async def test_ctrl_c_stops_agency_up_with_no_error(
    launcher: str, database_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": await _fresh_database(database_url),
        "AGENCY_LOG_FORMAT": "json",
    }
    for name in ("NATS_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENCY_PROCESSES"):
        env.pop(name, None)
    proc = await asyncio.create_subprocess_exec(
        *LAUNCHERS[launcher], "--data-dir", str(tmp_path / "up"), "--port", "0",
        "--processes", "single",
        cwd=REPO, env=env, start_new_session=True,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.create_task(proc.stderr.read())
    try:
        await printed_until_ready(proc, errors)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
        rest = (await asyncio.wait_for(proc.stdout.read(), timeout=10)).decode()
        stderr = (await asyncio.wait_for(errors, timeout=10)).decode()
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert rest.strip().endswith("stopped"), rest
    assert "error" not in stderr.lower(), stderr[-3000:]
    assert '"level": "warning"' not in stderr, stderr[-3000:]
