"""`agency demo` against the whole system over HTTP: each demo runs in the one agency named
`demo`."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.e2e.conftest import Client


async def demo(data_dir: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "demo", *args, "--data-dir", str(data_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "AGENCY_LOG_FORMAT": "console"},
    )  # fmt: skip
    async with asyncio.timeout(100):
        output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_each_demo_runs_in_the_one_agency_named_demo(client: Client, tmp_path: Path) -> None:
    client.write_endpoints(tmp_path)
    used = []
    for task in ("plan a picnic", "plan a hike"):
        code, out = await demo(tmp_path, task, "--timeout", "90")
        assert code == 0 and "■ completed" in out, out
        found = re.search(r"^agency (\S+), thread (\S+)$", out, re.M)
        assert found is not None, out
        used.append(found[1])
    agencies = (await client.http.get("/agencies")).json()
    named = [a["id"] for a in agencies if a["name"] == "demo"]
    assert named == [used[0]] and used[1] == used[0]
