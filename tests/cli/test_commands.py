"""The `agency` command as a person runs it: real processes, real servers."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agency.contracts.events import ChatMessage, MessageAppended, ThreadCreated
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.services.agents.blueprint_file import BlueprintFileError, load_blueprint_file
from tests.helpers import REPO, run_agency as agency


@pytest.fixture
async def background() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    procs: list[asyncio.subprocess.Process] = []
    yield procs
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def start(procs: list[asyncio.subprocess.Process], *args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    procs.append(proc)
    return proc


async def test_infra_up_writes_endpoints_answers_status_and_stops_cleanly(
    tmp_path: Path, background: list[asyncio.subprocess.Process]
) -> None:
    proc = await start(background, "infra", "up", "--data-dir", str(tmp_path))
    assert proc.stdout is not None
    lines = []
    async with asyncio.timeout(60):
        while not lines or lines[-1] != "ready; Ctrl-C to stop":
            lines.append((await proc.stdout.readline()).decode().strip())
    endpoints = json.loads((tmp_path / "endpoints.json").read_text())
    assert endpoints["pid"] == proc.pid
    assert endpoints["nats_url"].startswith("nats://") and endpoints["database_url"].startswith(
        "postgresql://"
    )

    code, out, _ = await agency("infra", "status", "--data-dir", str(tmp_path))
    assert code == 0 and "nats:" in out and "ok" in out

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    assert not (tmp_path / "endpoints.json").exists()
    code, out, _ = await agency("infra", "status", "--data-dir", str(tmp_path))
    assert code == 1 and "not running" in out


async def test_events_tail_prints_a_tenants_events(
    tmp_path: Path, nats_url: str, database_url: str, bus: Bus, tenant: str
) -> None:
    write_endpoints(
        tmp_path, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=database_url)
    )
    await bus.store.append(
        tenant, "thread", "th1",
        [ThreadCreated(agency_id="a", agent_type="helper"),
         MessageAppended(message=ChatMessage(role="user", content="hello tail"))],
        expected=Position(),
    )  # fmt: skip
    code, out, err = await agency(
        "events", "tail", "--tenant", tenant, "--from-seq", "1", "--limit", "2",
        "--data-dir", str(tmp_path),
    )  # fmt: skip
    assert code == 0, err
    assert "thread.created" in out and "user: hello tail" in out
    code, _, err = await agency(
        "events", "tail", "--tenant", "bad.tenant", "--data-dir", str(tmp_path)
    )
    assert code == 2 and "invalid tenant id" in err


async def test_serve_api_alone_answers_health(
    tmp_path: Path, nats_url: str, database_url: str, background: list[asyncio.subprocess.Process]
) -> None:
    write_endpoints(
        tmp_path, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=database_url)
    )
    proc = await start(background, "serve", "api", "--data-dir", str(tmp_path))
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode().strip()
    if not line.startswith("api: http://"):
        assert proc.stderr is not None
        pytest.fail((await proc.stderr.read()).decode()[-3000:])
    async with httpx.AsyncClient(base_url=line.removeprefix("api: "), timeout=10) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/agencies")).status_code == 401
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), timeout=30) == 0


@pytest.mark.parametrize("command", [("threads", "ls"), ("demo",), ("dlq", "ls")])
async def test_a_command_with_no_system_names_the_command_that_starts_one(
    command: tuple[str, ...], tmp_path: Path
) -> None:
    code, _, err = await agency(*command, "--data-dir", str(tmp_path))
    assert code == 2 and "no running system found" in err
    assert f"start one with `agency up --data-dir {tmp_path}`" in err, err


def test_blueprint_file_is_read_and_bad_files_are_refused_clearly(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps([{"name": "researcher", "prompt": "Research.", "tags": ["default"]}])
    )
    (blueprint,) = load_blueprint_file(good)
    assert blueprint.name == "researcher" and blueprint.tags == ("default",)
    bad = tmp_path / "bad.json"
    bad.write_text('[{"prompt": "no name"}]')
    with pytest.raises(BlueprintFileError, match="missing required field `name`"):
        load_blueprint_file(bad)
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([{"name": "a"}, {"name": "a"}]))
    with pytest.raises(BlueprintFileError, match="appear twice: a"):
        load_blueprint_file(twice)
    with pytest.raises(BlueprintFileError, match="cannot read blueprints"):
        load_blueprint_file(tmp_path / "missing.json")
