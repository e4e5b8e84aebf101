"""A whole system as separate OS processes, for kill tests: embedded NATS (one node or a
3-node cluster) and PostgreSQL of its own, and every service as `agency serve NAME`, several
workers each. Any part can be SIGKILLed and restarted: a service process, a NATS node, or
PostgreSQL (the servers come back on the same port and data directory).

    async with Harness(tmp_path, llm.base_url, workers={"runtime": 3}) as system:
        await system.kill("runtime-0")
        await system.restart("runtime-0")

The fake model is the test's own (`FakeLLMServer`, in the test process), reached through
`OPENAI_BASE_URL`. A service that exits without being killed is restarted like a
supervisor would and counted in `crashes`: a test asserts none happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from agency.infra.db import migrate
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.keystore.operator import OPERATOR_KEY_VARIABLE
from agency.infra.launch import (
    NatsCluster,
    NatsServer,
    PostgresServer,
    ensure_database,
    free_port,
)
from agency.projections.setup import prepare_read_models

REPO = Path(__file__).resolve().parents[2]
APP = "tests.faults.apps:system"
SERVICES = (
    "registry", "runtime", "tools", "subagents", "workflows", "projector", "gateway", "api",
    "webhooks",
)  # fmt: skip
DEFAULT_WORKERS: Mapping[str, int] = {
    "registry": 1,
    "runtime": 2,
    "tools": 2,
    "subagents": 1,
    "projector": 1,
    "gateway": 1,
    "api": 1,
}


@dataclass
class ServiceProcess:
    """One `agency serve NAME` process; its output goes to `log_path`."""

    name: str
    index: int
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    metrics_port: int = 0
    proc: asyncio.subprocess.Process | None = None
    killed: bool = False
    starts: int = 0

    @property
    def label(self) -> str:
        return f"{self.name}-{self.index}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            proc = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=REPO,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        # Only now: the supervisor must not see "not killed" beside the dead process.
        self.proc, self.killed = proc, False

    async def kill(self) -> None:
        self.killed = True
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(self.proc.wait(), timeout=10)

    async def stop(self, timeout: float = 15.0) -> None:
        self.killed = True
        if not self.alive:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), timeout=timeout)
        except TimeoutError:
            self.proc.send_signal(signal.SIGKILL)
            await asyncio.wait_for(self.proc.wait(), timeout=10)

    def printed(self, prefix: str) -> str | None:
        """The rest of the first line starting with `prefix` its current start printed."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return None
        current = text.rsplit(f"--- start {self.starts}\n", 1)[-1]
        for line in current.splitlines():
            if line.startswith(prefix):
                return line.removeprefix(prefix).strip()
        return None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Crash:
    label: str
    returncode: int | None
    log_tail: str


@dataclass
class Harness:
    """Start with `async with`; `targets` names what `kill` and `restart` accept."""

    root: Path
    llm_url: str
    workers: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WORKERS))
    app: str = APP
    ack_wait: float = 5.0
    cluster_size: int = 0  # 0: one NATS node; 3: a cluster with R3 streams
    partitions: int = 1  # the events log's (`docs/scaling.md`)
    model_timeout: float = 30.0
    ready_timeout: float = 120.0
    slow_starters: list[str] = field(default_factory=list)
    # Set in every service's environment, over the harness's own.
    env: Mapping[str, str] = field(default_factory=dict)
    services: list[ServiceProcess] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)
    nats: NatsServer | None = None
    cluster: NatsCluster | None = None
    postgres: PostgresServer | None = None
    database_url: str = ""
    _watch: asyncio.Task[None] | None = None

    @property
    def nats_url(self) -> str:
        """The admin's URL; each service connects as its own user (`agency serve`)."""
        if self.cluster is not None:
            return self.cluster.admin_url
        assert self.nats is not None
        return self.nats.admin_url

    @property
    def nats_auth_dir(self) -> str:
        auth = self.cluster.auth if self.cluster is not None else self.nats and self.nats.auth
        assert auth is not None
        return str(auth.directory)

    @property
    def targets(self) -> list[str]:
        servers = ["postgres"]
        if self.cluster is not None:
            servers += [f"nats-{i}" for i in range(self.cluster.size)]
        else:
            servers.append("nats")
        return servers + [s.label for s in self.services]

    def service(self, label: str) -> ServiceProcess:
        return next(s for s in self.services if s.label == label)

    def of(self, name: str) -> list[ServiceProcess]:
        return [s for s in self.services if s.name == name]

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        replicas = 1
        if self.cluster_size:
            self.cluster = NatsCluster(
                self.root / "nats", size=self.cluster_size, sync_interval="default", auth=True
            )
            await self.cluster.start()
            replicas = min(3, self.cluster_size)
        else:
            self.nats = NatsServer(self.root / "nats", sync_interval="default", auth=True)
            await self.nats.start()
        self.postgres = PostgresServer(self.root / "pg", fsync=False)
        await self.postgres.start()
        await ensure_database(self.postgres.url, "agency")
        self.database_url = self.postgres.database_url("agency")
        async with Bus(self.nats_url, name="harness-setup") as bus:
            streams = StreamSettings(replicas=replicas, partitions=self.partitions)
            await provision(bus.js, streams, nc=bus.nc)
        conn = await asyncpg.connect(self.database_url, timeout=10)
        try:
            await migrate(conn)
        finally:
            await conn.close(timeout=5)
        pool = await asyncpg.create_pool(self.database_url, min_size=1, max_size=2)
        try:
            await prepare_read_models(pool)
        finally:
            await pool.close()
        write_endpoints(
            self.root,
            Endpoints(
                pid=os.getpid(),
                nats_url=self.nats_url,
                database_url=self.database_url,
                nats_auth_dir=self.nats_auth_dir,
            ),
        )
        env = self._env(replicas)
        for name in SERVICES:
            for index in range(self.workers.get(name, 0)):
                metrics_port = free_port()
                argv = [
                    sys.executable, "-m", "agency.services.cli.main", "serve", name,
                    "--data-dir", str(self.root), "--app", self.app,
                    "--ack-wait", str(self.ack_wait), "--metrics-port", str(metrics_port),
                ]  # fmt: skip
                log = self.root / "logs" / f"{name}-{index}.log"
                self.services.append(
                    ServiceProcess(name, index, argv, env, log, metrics_port=metrics_port)
                )
        await asyncio.gather(*(s.start() for s in self.services))
        self._watch = asyncio.create_task(self._supervise(), name="harness-supervisor")
        self.slow_starters = await self.connected(timeout=self.ready_timeout)

    async def _connections(self) -> Counter[str]:
        """Client connections to NATS by name (services connect as `agency-<service>`)."""
        servers = list(self.cluster.nodes) if self.cluster is not None else [self.nats]
        counts: Counter[str] = Counter()
        async with httpx.AsyncClient(timeout=2.0) as http:
            for server in servers:
                assert server is not None
                try:
                    body = (await http.get(f"{server.monitor_url}/connz?limit=4096")).json()
                except (httpx.HTTPError, ValueError):
                    continue
                counts.update(str(c.get("name", "")) for c in body.get("connections") or ())
        return counts

    async def connected(self, timeout: float) -> list[str]:
        """Wait until every service process has connected to NATS, at most `timeout` s (on a
        busy machine a Python process takes seconds to start); the services still missing.
        Work sent meanwhile waits in the streams, so a caller may go on either way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            counts = await self._connections()
            missing = [
                name for name in SERVICES if counts[f"agency-{name}"] < self.workers.get(name, 0)
            ]
            if not missing or loop.time() >= deadline:
                return missing
            await asyncio.sleep(0.25)

    def _env(self, replicas: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "AGENCY_"))}
        # The test process's operator key (tests/conftest.py): the workload it drives seals
        # with the same tenant keys as the services, as every process of a deployment does.
        if key := os.environ.get(OPERATOR_KEY_VARIABLE):
            env[OPERATOR_KEY_VARIABLE] = key
        env.update(
            OPENAI_BASE_URL=self.llm_url,
            OPENAI_API_KEY="fake",
            NATS_URL=self.nats_url,
            DATABASE_URL=self.database_url,
            AGENCY_STREAM_REPLICAS=str(replicas),
            AGENCY_MODEL_TIMEOUT=str(self.model_timeout),
            AGENCY_LOG_FORMAT="json",
        )
        env.update(self.env)
        return env

    async def _supervise(self) -> None:
        """Restart services that exited without being killed, and record each such crash."""
        while True:
            for service in self.services:
                if service.alive or service.killed or service.proc is None:
                    continue
                self.crashes.append(
                    Crash(service.label, service.proc.returncode, service.log_tail())
                )
                await service.start()
            await asyncio.sleep(0.2)

    async def kill(self, target: str) -> None:
        """SIGKILL a service process, a NATS node, or PostgreSQL."""
        if target == "postgres":
            assert self.postgres is not None
            await self.postgres.kill()
        elif target == "nats":
            assert self.nats is not None
            await self.nats.kill()
        elif target.startswith("nats-"):
            assert self.cluster is not None
            await self.cluster.node(int(target.removeprefix("nats-"))).kill()
        else:
            await self.service(target).kill()

    async def restart(self, target: str) -> None:
        """Start a killed part again: servers on the same port and data directory."""
        if target == "postgres":
            assert self.postgres is not None
            await self.postgres.start()
        elif target == "nats":
            assert self.nats is not None
            await self.nats.start()
        elif target.startswith("nats-"):
            assert self.cluster is not None
            await self.cluster.start()
        else:
            await self.service(target).start()

    async def api_url(self, label: str = "api-0", timeout: float = 120.0) -> str:
        """The URL the API process serves on (a free port, another after a restart), once
        its current start has printed it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        service = self.service(label)
        while (url := service.printed("api: ")) is None:
            if loop.time() >= deadline:
                raise TimeoutError(f"{label} printed no URL within {timeout}s")
            await asyncio.sleep(0.1)
        return url

    def pid(self, label: str) -> int:
        """The OS process id of a running service process (`api-0`, `runtime-1`)."""
        proc = self.service(label).proc
        assert proc is not None and proc.returncode is None, f"{label} is not running"
        return proc.pid

    async def outage_waits(self) -> Counter[str]:
        """The outages the running service processes waited out, by how each wait ended
        (`agency_outage_waits_total`; a process restarted since counts from its start)."""
        waits: Counter[str] = Counter()
        async with httpx.AsyncClient(timeout=5.0) as http:
            for service in self.services:
                if not service.alive:
                    continue
                url = f"http://127.0.0.1:{service.metrics_port}/metrics"
                try:
                    text = (await http.get(url)).text
                except httpx.HTTPError:
                    continue
                for family in text_string_to_metric_families(text):
                    if family.name != "agency_outage_waits":
                        continue
                    for sample in family.samples:
                        if sample.name.endswith("_total"):
                            waits[sample.labels["outcome"]] += int(sample.value)
        return waits

    def crash_report(self) -> str:
        return "\n\n".join(f"{c.label} exited {c.returncode}:\n{c.log_tail}" for c in self.crashes)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        await asyncio.gather(*(s.stop() for s in self.services), return_exceptions=True)
        if self.postgres is not None:
            await self.postgres.stop()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.nats is not None:
            await self.nats.stop()
