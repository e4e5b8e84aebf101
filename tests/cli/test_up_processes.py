"""`agency up` runs each service in a worker process of its own: a run completes through
them, a killed one is restarted, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit

import asyncpg
import httpx
import pytest

from agency.contracts.ids import new_id
from agency.infra.launch.process import child_pids, pid_alive
from agency.infra.nats_auth import SERVICE_ROLES
from agency.services.cli.main import build_parser
from agency.services.cli.up_processes import CHILD_SERVICES, in_processes, usable_cores
from tests.helpers import assert_eventually, printed_until_ready, run_completes_over_http

REPO = Path(__file__).resolve().parents[2]
SERVICES = {r for r in SERVICE_ROLES if r != "api"}


def _service_children(pid: int) -> dict[str, int]:
    """`agency serve NAME` children of `pid`, by NAME."""
    found: dict[str, int] = {}
    for child in child_pids(pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue
        words = [a.decode() for a in argv]
        if "serve" in words and pid_alive(child):
            found[words[words.index("serve") + 1]] = child
    return found


async def _fresh_database(database_url: str) -> str:
    name = "db" + new_id().lower()
    admin = await asyncpg.connect(database_url, timeout=10)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close(timeout=5)
    parts = urlsplit(database_url)
    return parts._replace(path="/" + quote(name, safe="")).geturl()


def test_the_layout_is_auto_unless_the_flag_or_environment_says_otherwise(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AGENCY_PROCESSES", raising=False)
    assert build_parser().parse_args(["up"]).processes == "auto"
    assert in_processes("auto", cores=2) == () and in_processes("auto", cores=1) == ()
    assert in_processes("auto", cores=4) == CHILD_SERVICES
    assert in_processes("auto") == (CHILD_SERVICES if usable_cores() >= 4 else ())
    assert build_parser().parse_args(["up", "--processes", "services"]).processes == "services"
    assert build_parser().parse_args(["up", "--processes", "1"]).processes == "single"
    monkeypatch.setenv("AGENCY_PROCESSES", "single")
    assert build_parser().parse_args(["up"]).processes == "single"
    monkeypatch.setenv("AGENCY_PROCESSES", "two")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up"])
    assert (
        "'two': expected one of auto, services, single, 1, or services among"
        in capsys.readouterr().err
    )
    assert in_processes("single") == ()
    assert in_processes("services") == CHILD_SERVICES and "api" not in CHILD_SERVICES
    assert in_processes(
        build_parser().parse_args(["up", "--processes", "tools,runtime"]).processes
    ) == ("runtime", "tools")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--processes", "runtime,api"])


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_agency_up_runs_services_in_processes_restarts_a_killed_one_and_stops_them_all(
    database_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": await _fresh_database(database_url),
        "AGENCY_LOG_FORMAT": "json",
    }
    # Its own NATS server, with a user per service, as on a fresh machine.
    for name in ("NATS_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENCY_PROCESSES"):
        env.pop(name, None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "up", "--data-dir", str(tmp_path / "up"),
        "--port", "0", "--app", "tests.runtime.conftest:make_system", "--processes", "services",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.create_task(proc.stderr.read())
    seen: set[int] = set()
    try:
        printed = await printed_until_ready(proc, errors)
        api, api_key = printed["api"].split()[0], printed["api key"]

        async def every_service_in_its_own_process() -> dict[str, int]:
            children = _service_children(proc.pid)
            assert set(children) == SERVICES, children
            return children

        children = await assert_eventually(every_service_in_its_own_process, timeout=30)
        assert len(set(children.values())) == len(SERVICES)
        assert proc.pid not in children.values()
        seen.update(children.values())

        headers = {"Authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(base_url=api, headers=headers, timeout=20) as http:

            async def ready() -> None:
                r = await http.get("/readyz")
                assert r.status_code == 200, r.text

            await assert_eventually(ready, timeout=30)
            # The tenant's agency named `default`, where the CLI and LangGraph's clients work.
            assert [a["name"] for a in (await http.get("/agencies")).json()] == ["default"]
            r = await http.post("/agencies", json={"name": "processes"})
            assert r.status_code == 201, r.text
            agency = r.json()["id"]
            await run_completes_over_http(http, agency)

            # A crash of the runtime's process: it is started again, the others go on.
            killed = children["runtime"]
            os.kill(killed, signal.SIGKILL)

            async def runtime_restarted() -> int:
                pid = _service_children(proc.pid).get("runtime")
                assert pid is not None and pid != killed
                return pid

            seen.add(await assert_eventually(runtime_restarted, timeout=30))
            assert {n: p for n, p in _service_children(proc.pid).items() if n != "runtime"} == {
                n: p for n, p in children.items() if n != "runtime"
            }
            await assert_eventually(ready, timeout=30)
            await run_completes_over_http(http, agency)
        seen.update(child_pids(proc.pid))  # NATS too

        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
        assert [pid for pid in seen if pid_alive(pid)] == []
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await asyncio.wait_for(errors, timeout=10)
