"""A loopback NATS cluster: nodes n1..nN of `NatsServer` with routes between them, for the
cluster tests (a node lost, a meta leader re-elected)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import structlog

from agency.infra.launch.errors import LaunchError, PortInUse, StartTimeout
from agency.infra.launch.lifecycle import Server
from agency.infra.launch.nats_server import ClusterConfig, NatsServer
from agency.infra.launch.process import free_port, poll_until, start_on_free_ports
from agency.infra.nats_auth import NatsAuth

log = structlog.get_logger(__name__)


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
