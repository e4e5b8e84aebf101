"""Launchers for embedded infrastructure: nats-server (single node or cluster) and PostgreSQL."""

from agency.infra.launch.errors import (
    BackendUnavailable,
    BinaryNotFound,
    CommandFailed,
    LaunchError,
    PortInUse,
    ProcessExited,
    StartTimeout,
    StopTimeout,
)
from agency.infra.launch.nats_cluster import NatsCluster
from agency.infra.launch.nats_server import ClusterConfig, NatsServer, nats_server_binary
from agency.infra.launch.postgres_binaries import pg_bin_dir
from agency.infra.launch.postgres_server import PostgresServer, ensure_database
from agency.infra.launch.process import ChildProcess, child_pids, free_port, pid_alive, poll_until
from agency.infra.launch.testcontainers_backend import (
    NatsContainerServer,
    PostgresContainerServer,
    choose_nats,
    choose_postgres,
    docker_available,
    testcontainers_requested,
    use_testcontainers,
)

__all__ = [
    "BackendUnavailable",
    "BinaryNotFound",
    "ChildProcess",
    "ClusterConfig",
    "CommandFailed",
    "LaunchError",
    "NatsCluster",
    "NatsContainerServer",
    "NatsServer",
    "PortInUse",
    "PostgresContainerServer",
    "PostgresServer",
    "ProcessExited",
    "StartTimeout",
    "StopTimeout",
    "child_pids",
    "choose_nats",
    "choose_postgres",
    "docker_available",
    "ensure_database",
    "free_port",
    "nats_server_binary",
    "pg_bin_dir",
    "pid_alive",
    "poll_until",
    "testcontainers_requested",
    "use_testcontainers",
]
