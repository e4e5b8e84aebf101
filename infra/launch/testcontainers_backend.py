"""NATS and PostgreSQL in Docker through testcontainers, where asked for and an engine answers.

Set `AGENCY_TEST_BACKEND=testcontainers` to prefer containers; without a Docker engine (as on our
own machines) `choose_nats` / `choose_postgres` fall back to the embedded binaries. testcontainers
is imported lazily: it is a dev-only dependency.
"""

from __future__ import annotations

import asyncio
import os
import stat
from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import structlog

from agency.infra.launch.errors import BackendUnavailable
from agency.infra.launch.lifecycle import Server
from agency.infra.launch.nats_server import NatsServer
from agency.infra.launch.postgres_server import PostgresServer, ensure_database

if TYPE_CHECKING:
    from testcontainers.community.nats import NatsContainer
    from testcontainers.community.postgres import PostgresContainer
    from testcontainers.core.container import DockerContainer

log = structlog.get_logger(__name__)
C = TypeVar("C", bound="DockerContainer")
S = TypeVar("S")
E = TypeVar("E")

BACKEND_ENV = "AGENCY_TEST_BACKEND"
_DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
_NATS_CONFIG_PATH = "/etc/nats/agency.conf"
_NATS_CLIENT_PORT = 4222
_NATS_MONITOR_PORT = 8222


def testcontainers_requested() -> bool:
    return os.environ.get(BACKEND_ENV, "").strip().lower() == "testcontainers"


def docker_available(timeout: float = 1.0) -> bool:
    """Whether a Docker engine answers a ping; milliseconds without a socket; never raises."""
    host = os.environ.get("DOCKER_HOST") or _DEFAULT_DOCKER_HOST
    if host.startswith("unix://"):
        try:
            if not stat.S_ISSOCK(os.stat(host.removeprefix("unix://")).st_mode):
                return False
        except OSError:
            return False
    try:
        import docker

        # The client constructor already asks the engine for its API version.
        client = docker.DockerClient(base_url=host, timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    # A probe: any failure (no engine, refused, TLS, timeout, docker not installed) means "no".
    except Exception:
        return False


def use_testcontainers() -> bool:
    """Containers were asked for and a Docker engine answers."""
    return testcontainers_requested() and docker_available()


def _require_docker() -> None:
    if not docker_available():
        host = os.environ.get("DOCKER_HOST") or _DEFAULT_DOCKER_HOST
        raise BackendUnavailable(
            "testcontainers", f"no Docker engine answers at {host}; unset {BACKEND_ENV}"
        )


def _not_importable(e: ImportError) -> BackendUnavailable:
    return BackendUnavailable(
        "testcontainers",
        f"the testcontainers package is not importable ({e}); install the dev extra",
    )


def _nats_config(sync_interval: str) -> bytes:
    sync = f'  sync_interval: "{sync_interval}"\n' if sync_interval != "default" else ""
    return (
        f'listen: "0.0.0.0:{_NATS_CLIENT_PORT}"\n'
        f'http: "0.0.0.0:{_NATS_MONITOR_PORT}"\n'
        f'jetstream {{\n  store_dir: "/data"\n{sync}}}\n'
    ).encode()


def _start_nats_container(image: str, sync_interval: str) -> NatsContainer:
    _require_docker()
    try:
        from testcontainers.community.nats import NatsContainer
    except ImportError as e:
        raise _not_importable(e) from e
    # jetstream=False: our config file turns it on, with the store and sync policy we want.
    container = NatsContainer(image, jetstream=False)
    container.with_copy_into_container(_nats_config(sync_interval), _NATS_CONFIG_PATH)
    container.with_command(["-c", _NATS_CONFIG_PATH])
    # Waits for "Server is ready" in the container log.
    container.start()
    return container


def _start_postgres_container(image: str, fsync: bool) -> PostgresContainer:
    _require_docker()
    try:
        from testcontainers.community.postgres import PostgresContainer
    except ImportError as e:
        raise _not_importable(e) from e
    container = PostgresContainer(
        image, username="postgres", password="postgres", dbname="postgres", driver=None
    )
    # Every TCP client gives a SCRAM password, as with the embedded server (the image's
    # own default trusts loopback inside the container); its wait uses the local socket.
    container.with_env("POSTGRES_INITDB_ARGS", "--auth-host=scram-sha-256")
    on_off = "on" if fsync else "off"
    container.with_command(
        f"postgres -c fsync={on_off} -c synchronous_commit={on_off} "
        f"-c full_page_writes={on_off} -c max_connections=200"
    )
    # Waits until psql inside the container answers.
    container.start()
    return container


@contextmanager
def nats_container(*, image: str = "nats:2.14", sync_interval: str = "always") -> Iterator[str]:
    """A JetStream container for synchronous callers; yields its nats:// URL."""
    container = _start_nats_container(image, sync_interval)
    try:
        yield container.nats_uri()
    finally:
        container.stop()


@contextmanager
def postgres_container(*, image: str = "postgres:18", fsync: bool = True) -> Iterator[str]:
    """A PostgreSQL container for synchronous callers; yields its postgresql:// URL."""
    container = _start_postgres_container(image, fsync)
    try:
        # driver=None: a plain postgresql:// URL, as asyncpg expects.
        yield container.get_connection_url(driver=None)
    finally:
        container.stop()


class _ContainerServer(Server, Generic[C]):
    """A server in a container (`_container` once started), stopped with the container."""

    _url = ""

    def __init__(self, image: str, start_timeout: float) -> None:
        self.image = image
        self.start_timeout = start_timeout
        self._container: C | None = None

    @property
    def url(self) -> str:
        return self._url

    async def start(self) -> None:
        if self._container is not None:
            return
        # The thread cannot be cancelled; Ryuk removes a container whose start we gave up on.
        container = await asyncio.wait_for(
            asyncio.to_thread(self._start_container), self.start_timeout
        )
        self._container = container
        self._started(container)

    @abstractmethod
    def _start_container(self) -> C:
        """Start the container and wait until it is ready (blocking: run in a thread)."""

    @abstractmethod
    def _started(self, container: C) -> None:
        """Take the URLs of the started container."""

    async def stop(self, timeout: float = 30.0) -> None:
        container, self._container = self._container, None
        if container is not None:
            await asyncio.wait_for(asyncio.to_thread(container.stop), timeout)


class NatsContainerServer(_ContainerServer["NatsContainer"]):
    """nats-server with JetStream in a container; the same `url` / `monitor_url` as NatsServer."""

    def __init__(
        self,
        *,
        image: str = "nats:2.14",
        sync_interval: str = "always",
        start_timeout: float = 120.0,
    ) -> None:
        super().__init__(image, start_timeout)
        self.sync_interval = sync_interval
        self._monitor_url = ""

    @property
    def monitor_url(self) -> str:
        return self._monitor_url

    def _start_container(self) -> NatsContainer:
        return _start_nats_container(self.image, self.sync_interval)

    def _started(self, container: NatsContainer) -> None:
        host = container.get_container_host_ip()
        self._url = container.nats_uri()
        self._monitor_url = f"http://{host}:{container.get_exposed_port(_NATS_MONITOR_PORT)}"
        log.info("nats_container_ready", url=self._url, image=self.image)


class PostgresContainerServer(_ContainerServer["PostgresContainer"]):
    """PostgreSQL in a container, with the URL helpers of PostgresServer."""

    def __init__(
        self,
        *,
        image: str = "postgres:18",
        fsync: bool = True,
        start_timeout: float = 120.0,
    ) -> None:
        super().__init__(image, start_timeout)
        self.fsync = fsync

    def database_url(self, name: str) -> str:
        parts = urlsplit(self._url)
        return urlunsplit(parts._replace(path="/" + quote(name, safe="")))

    async def create_database(self, name: str, timeout: float = 10.0) -> str:
        await ensure_database(self._url, name, timeout=timeout)
        return self.database_url(name)

    def _start_container(self) -> PostgresContainer:
        return _start_postgres_container(self.image, self.fsync)

    def _started(self, container: PostgresContainer) -> None:
        # driver=None: a plain postgresql:// URL, as asyncpg expects.
        self._url = container.get_connection_url(driver=None)
        log.info("postgres_container_ready", image=self.image)


def choose_nats(
    store_dir: Path, *, sync_interval: str = "always"
) -> NatsServer | NatsContainerServer:
    """A container when testcontainers is requested and Docker answers, else the embedded binary."""
    return _choose(
        lambda: NatsContainerServer(sync_interval=sync_interval),
        lambda: NatsServer(store_dir, sync_interval=sync_interval),
        "embedded nats-server",
    )


def choose_postgres(
    data_dir: Path, *, fsync: bool = True
) -> PostgresServer | PostgresContainerServer:
    """A container when testcontainers is requested and Docker answers, else embedded binaries."""
    return _choose(
        lambda: PostgresContainerServer(fsync=fsync),
        lambda: PostgresServer(data_dir, fsync=fsync),
        "embedded postgres",
    )


def _choose(container: Callable[[], S], embedded: Callable[[], E], fallback: str) -> S | E:
    if use_testcontainers():
        return container()
    if testcontainers_requested():
        log.warning("testcontainers_requested_without_docker", fallback=fallback)
    return embedded()
