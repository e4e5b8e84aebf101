"""Deployments of their own for archives and backups: each with a NATS server in a data
directory of its own and a database of its own, every service and the API, the fake model
over HTTP. One runs at a time: the next starts once the last has stopped, so no two share
durable consumers (tests/fairness/conftest.py says why that matters)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from structlog.testing import capture_logs

from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import provision
from agency.infra.launch import NatsServer
from agency.services.cli import archive_cmd
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, running_system
from tests.helpers import assert_eventually

TIMEOUT = 30.0
# Where a command would find PostgreSQL if it looked: nothing listens there.
NOWHERE = "postgresql://agency:agency@127.0.0.1:9/nowhere?connect_timeout=1"


@dataclass
class Deployment:
    url: str
    llm: FakeLLMServer
    nats: NatsServer
    admin: httpx.AsyncClient

    async def tenant(self, name: str) -> tuple[str, str]:
        """A new tenant: (its id, its API key)."""
        r = await self.admin.post("/tenants", json={"name": name})
        assert r.status_code == 201, r.text
        return str(r.json()["tenantId"]), str(r.json()["apiKey"])

    def client(self, key: str) -> httpx.AsyncClient:
        auth = {"Authorization": f"Bearer {key}"}
        return httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT, headers=auth)


@asynccontextmanager
async def nats_in(directory: Path) -> AsyncIterator[NatsServer]:
    """An embedded NATS server storing in `directory`, as `agency up` runs it."""
    async with NatsServer(directory, sync_interval="default", auth=True) as server:
        yield server


@asynccontextmanager
async def deployment(server: NatsServer, database_url: str) -> AsyncIterator[Deployment]:
    """Every service and the API on `server` and a fresh database."""
    async with Bus(server.admin_url, name="archive-provision") as bus:
        await provision(bus.js)
    async with (
        FakeLLMServer(instant=True) as llm,
        running_system(server.admin_url, database_url, server, llm) as url,
        httpx.AsyncClient(
            base_url=url, timeout=TIMEOUT, headers={"Authorization": f"Bearer {ADMIN}"}
        ) as admin,
    ):
        yield Deployment(url=url, llm=llm, nats=server, admin=admin)


async def until_state(
    http: httpx.AsyncClient, path: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The thread's `/state` once `check` holds (bounded)."""

    async def ready() -> dict[str, Any]:
        r = await http.get(f"{path}/state")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        assert check(body), body["run"]
        return body

    return await assert_eventually(ready, timeout=TIMEOUT, interval=0.1)


@dataclass(frozen=True)
class Ran:
    status: int
    out: str
    err: str


def endpoints_for(directory: Path, server: NatsServer) -> Path:
    """A data directory whose endpoints.json names `server` (the operator's credentials)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_endpoints(
        directory,
        Endpoints(pid=os.getpid(), nats_url=server.admin_url, database_url=NOWHERE),
    )
    return directory


async def cli(*argv: str) -> Ran:
    """Run `agency export|import|backup ...` in this event loop, with what it printed."""
    parser = argparse.ArgumentParser(prog="agency")
    archive_cmd.register(parser.add_subparsers(dest="group", required=True))
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status: int = await args.handler(args)
    return Ran(status, out.getvalue(), err.getvalue())
