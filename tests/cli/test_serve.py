"""`agency serve NAME` as a process: a service that fails is restarted, the process lives on."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import asyncpg
import httpx

from agency.contracts.ids import new_id
from agency.infra.db import migrate
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.projections.catalog import ALL
from tests.helpers import assert_eventually

REPO = Path(__file__).resolve().parents[2]


async def test_serve_restarts_a_service_started_before_its_database_then_serves(
    tmp_path: Path, bus: Bus, nats_url: str, database_url: str
) -> None:
    name = "serve" + new_id().lower()
    url = database_url.rsplit("/", 1)[0] + "/" + name
    del bus  # the streams exist: only the database is missing
    write_endpoints(tmp_path, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=url))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "serve", "projector", "--data-dir", str(tmp_path),
        cwd=REPO, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        # The database does not exist yet: the projector fails, and is restarted.
        log = b""
        async with asyncio.timeout(60):
            while log.count(b"service failed, restarting") < 2:
                line = await proc.stderr.readline()
                assert line, f"agency serve exited: {log.decode()[-2000:]}"
                log += line
        assert proc.returncode is None
        rest = asyncio.create_task(proc.stderr.read())

        admin = await asyncpg.connect(database_url, timeout=10)
        try:
            await admin.execute(f'CREATE DATABASE "{name}"')
        finally:
            await admin.close(timeout=5)
        conn = await asyncpg.connect(url, timeout=10)
        try:
            await migrate(conn)

            async def projecting() -> None:
                count = await conn.fetchval("SELECT count(*) FROM agency_projection_checkpoints")
                assert count == len(ALL)

            try:
                await assert_eventually(projecting, timeout=60, interval=0.2)
            except AssertionError:
                proc.kill()
                raise AssertionError((await rest).decode()[-3000:]) from None
        finally:
            await conn.close(timeout=5)
        assert proc.returncode is None
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
        await asyncio.wait_for(rest, timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_with_a_metrics_port_serves_the_process_outage_waits(
    tmp_path: Path, nats_url: str, database_url: str
) -> None:
    """`--metrics-port 0`: a free port, named on stdout, answering Prometheus text with the
    process's outage metrics, for as long as the process runs (its service restarting)."""
    url = database_url.rsplit("/", 1)[0] + "/missing" + new_id().lower()
    write_endpoints(tmp_path, Endpoints(pid=os.getpid(), nats_url=nats_url, database_url=url))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "serve", "projector",
        "--data-dir", str(tmp_path), "--metrics-port", "0",
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            line = await proc.stdout.readline()
        assert line.startswith(b"metrics: http://127.0.0.1:"), line
        async with httpx.AsyncClient(timeout=10) as http:
            response = await http.get(line.decode().split(" ", 1)[1].strip())
        assert response.status_code == 200
        for family in (
            "agency_outage_waiting",
            "agency_outage_waits_total",
            "agency_outage_wait_seconds",
        ):
            assert f"# TYPE {family} " in response.text
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
