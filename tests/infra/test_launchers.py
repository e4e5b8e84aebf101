"""The embedded launchers against the real nats-server and PostgreSQL binaries."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import asyncpg
import nats
import nats.errors
import nats.js.errors
import pytest
import structlog
from nats.aio.client import Client as NatsClient
from nats.js.api import StorageType, StreamConfig

from agency.infra.jetstream.errors import is_transient
from agency.infra.launch import (
    BackendUnavailable,
    NatsCluster,
    NatsContainerServer,
    NatsServer,
    PortInUse,
    PostgresServer,
    ProcessExited,
    child_pids,
    choose_nats,
    choose_postgres,
    docker_available,
    pid_alive,
    poll_until,
)
from agency.infra.settings import InfraSettings

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]

# Server-side hiccups while a cluster elects a new leader; anything else is a real failure.
TRANSIENT_NATS_ERRORS = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


async def assert_eventually(
    check: Callable[[], Awaitable[T | None]], *, timeout: float, what: str
) -> T:
    result = await poll_until(check, timeout=timeout, interval=0.05)
    assert result is not None, f"not within {timeout} s: {what}"
    return result


async def assert_pids_gone(pids: list[int], *, timeout: float) -> None:
    async def gone() -> bool | None:
        return True if not any(pid_alive(pid) for pid in pids) else None

    survivors = [pid for pid in pids if pid_alive(pid)]
    await assert_eventually(gone, timeout=timeout, what=f"processes {survivors} exit")


async def retry_transient(
    call: Callable[[], Awaitable[T]], *, budget: float, pause: float = 0.2
) -> T:
    """Retry `call` on transient NATS errors until `budget` seconds have passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + budget
    while True:
        try:
            return await call()
        except Exception as e:
            # The product's own rule besides: "no suitable peers for placement" (10005) while
            # the new leader does not yet know every peer is one of them.
            if not isinstance(e, TRANSIENT_NATS_ERRORS) and not is_transient(e):
                raise
            if loop.time() >= deadline:
                raise
            await asyncio.sleep(pause)


@asynccontextmanager
async def nats_client(servers: list[str]) -> AsyncIterator[NatsClient]:
    nc = await nats.connect(
        servers=servers, connect_timeout=2, reconnect_time_wait=0.2, max_reconnect_attempts=-1
    )
    try:
        yield nc
    finally:
        await asyncio.wait_for(nc.close(), 5)


def proc_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


# --- NATS -------------------------------------------------------------------------------------


async def test_nats_on_port_zero_serves_jetstream_and_stop_leaves_no_process(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "nats")
    async with server:
        assert server.port != 0
        assert server.url == f"nats://127.0.0.1:{server.port}"
        pid = server.pid
        assert pid is not None
        assert pid_alive(pid)
        async with nats_client([server.url]) as nc:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="LAUNCH", subjects=["launch.>"]))
            ack = await js.publish("launch.one", b"hello", timeout=5)
            stored = await js.get_msg("LAUNCH", ack.seq)
            assert stored.data == b"hello"
    assert not pid_alive(pid)
    await server.stop()  # idempotent


async def test_nats_runs_under_its_memory_limit_unless_the_environment_sets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def limit_of(pid: int) -> str | None:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        found = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"GOMEMLIMIT=")]
        return found[0].decode() if found else None

    monkeypatch.delenv("GOMEMLIMIT", raising=False)
    async with NatsServer(tmp_path / "a", memory_limit="64MiB") as server:
        assert server.pid is not None
        assert limit_of(server.pid) == "64MiB"
    monkeypatch.setenv("GOMEMLIMIT", "1GiB")
    async with NatsServer(tmp_path / "b", memory_limit="64MiB") as server:
        assert server.pid is not None
        assert limit_of(server.pid) == "1GiB"
    monkeypatch.setenv("AGENCY_NATS_MEMORY_LIMIT", "lots")
    with pytest.raises(ValueError, match="AGENCY_NATS_MEMORY_LIMIT='lots'"):
        InfraSettings.from_env()
    monkeypatch.setenv("AGENCY_NATS_MEMORY_LIMIT", "off")
    assert InfraSettings.from_env().nats_memory_limit is None
    monkeypatch.delenv("AGENCY_NATS_MEMORY_LIMIT")
    assert InfraSettings.from_env().nats_memory_limit == "256MiB"


async def test_nats_collects_garbage_at_its_gc_percent_unless_the_environment_sets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def gogc_of(pid: int) -> str | None:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        found = [e.split(b"=", 1)[1] for e in environ if e.startswith(b"GOGC=")]
        return found[0].decode() if found else None

    monkeypatch.delenv("GOGC", raising=False)
    async with NatsServer(tmp_path / "a", gc_percent=50) as server:
        assert server.pid is not None
        assert gogc_of(server.pid) == "50"
    monkeypatch.setenv("GOGC", "200")
    async with NatsServer(tmp_path / "b", gc_percent=50) as server:
        assert server.pid is not None
        assert gogc_of(server.pid) == "200"
    monkeypatch.setenv("AGENCY_NATS_GOGC", "lots")
    with pytest.raises(ValueError, match="AGENCY_NATS_GOGC='lots'"):
        InfraSettings.from_env()
    monkeypatch.setenv("AGENCY_NATS_GOGC", "off")
    assert InfraSettings.from_env().nats_gc_percent is None
    monkeypatch.delenv("AGENCY_NATS_GOGC")
    assert InfraSettings.from_env().nats_gc_percent == 50


async def test_nats_restart_after_kill_keeps_url_and_acknowledged_messages(
    tmp_path: Path,
) -> None:
    server = NatsServer(tmp_path / "nats")
    async with server:
        url = server.url
        async with nats_client([url]) as nc:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name="DURABLE", subjects=["durable.>"]))
            ack = await js.publish("durable.x", b"kept", timeout=5)
        await server.kill()
        assert not server.running
        await server.start()
        assert server.url == url
        async with nats_client([url]) as nc:
            stored = await nc.jetstream().get_msg("DURABLE", ack.seq)
            assert stored.data == b"kept"


async def test_nats_bad_config_raises_process_exited_with_log_tail(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "nats", sync_interval="not-a-duration")
    with pytest.raises(ProcessExited) as info:
        await server.start(timeout=5)
    assert "sync_interval" in info.value.log_tail
    assert "sync_interval" in str(info.value)
    assert not server.running


async def test_nats_fixed_port_in_use_raises_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = NatsServer(tmp_path / "nats", port=taken.getsockname()[1])
        with pytest.raises(PortInUse, match="address already in use"):
            await server.start(timeout=5)
    assert not server.running


# --- PostgreSQL -------------------------------------------------------------------------------


async def test_postgres_starts_under_root_owned_0700_parent_and_accepts_queries(
    tmp_path: Path,
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    before = locked.stat()
    async with PostgresServer(locked / "pg", fsync=False) as pg:
        conn = await asyncpg.connect(pg.url, timeout=5)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close(timeout=5)
        assert pg.pid is not None
        if os.geteuid() == 0:
            assert proc_uid(pg.pid) != 0, "postgres must not run as root"
    after = locked.stat()
    # Nothing outside the data dir had its permissions changed.
    assert (stat.S_IMODE(after.st_mode), after.st_uid) == (0o700, before.st_uid)


async def test_postgres_restart_on_existing_data_dir_keeps_data(tmp_path: Path) -> None:
    async with PostgresServer(tmp_path / "pg") as pg:
        url = await pg.create_database("keep")
        assert await pg.create_database("keep") == url  # idempotent
        conn = await asyncpg.connect(url, timeout=5)
        try:
            await conn.execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('survives')")
        finally:
            await conn.close(timeout=5)
    async with PostgresServer(tmp_path / "pg") as pg:
        conn = await asyncpg.connect(pg.database_url("keep"), timeout=5)
        try:
            assert await conn.fetchval("SELECT v FROM t") == "survives"
        finally:
            await conn.close(timeout=5)


def processes_naming(path: Path) -> list[str]:
    """The command lines of live processes that name `path` or work in it."""
    found: list[str] = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if not entry.name.isdigit():
                continue
            cmdline = (entry / "cmdline").read_text().replace("\0", " ")
            if str(path) in cmdline or str(path) in os.readlink(entry / "cwd"):
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state not in ("Z", "X"):
                    found.append(cmdline)
    return found


async def test_postgres_first_start_cut_short_during_initdb_starts_next_time(
    tmp_path: Path,
) -> None:
    server = PostgresServer(tmp_path / "pg", fsync=False)
    first = asyncio.create_task(server.start())

    async def initdb_writing() -> bool | None:
        return True if any((tmp_path / "pg").glob("pgdata.initdb-*/PG_VERSION")) else None

    await assert_eventually(initdb_writing, timeout=30, what="initdb writes the cluster")
    first.cancel()  # the process dies while initdb writes the cluster
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled() and not (server.pgdata / "PG_VERSION").exists()
    assert processes_naming(tmp_path) == [], "initdb's bootstrap postgres outlived it"

    async with PostgresServer(tmp_path / "pg", fsync=False) as pg:
        conn = await asyncpg.connect(pg.url, timeout=5)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close(timeout=5)


async def test_postgres_start_stops_a_leftover_server_of_the_same_data_dir(
    tmp_path: Path,
) -> None:
    """A launcher that lost track of its server (say after a crash) does not block the next."""
    leftover = PostgresServer(tmp_path / "pg", fsync=False)
    await leftover.start()
    try:
        leftover_pid = leftover.pid
        assert leftover_pid is not None
        workers = child_pids(leftover_pid)
        async with PostgresServer(tmp_path / "pg", fsync=False) as pg:
            await assert_pids_gone([leftover_pid, *workers], timeout=10)
            conn = await asyncpg.connect(pg.url, timeout=5)
            try:
                assert await conn.fetchval("SELECT 1") == 1
            finally:
                await conn.close(timeout=5)
    finally:
        await leftover.stop()


# --- Parent death -----------------------------------------------------------------------------

_LAUNCHER_SCRIPT = """
import asyncio, json, sys
from pathlib import Path
from agency.infra.launch import NatsServer, PostgresServer, child_pids

async def main() -> None:
    root = Path(sys.argv[1])
    async with NatsServer(root / "nats") as ns, PostgresServer(root / "pg", fsync=False) as pg:
        print("PIDS " + json.dumps([ns.pid, pg.pid, *child_pids(pg.pid)]), flush=True)
        await asyncio.Event().wait()  # until the test SIGKILLs us

asyncio.run(main())
"""


async def test_sigkill_of_launching_process_leaves_no_orphan(tmp_path: Path) -> None:
    """NATS, the postmaster and its workers all exit when their launcher is SIGKILLed."""
    launcher = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _LAUNCHER_SCRIPT, str(tmp_path),
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert launcher.stdout is not None
    output: asyncio.StreamReader = launcher.stdout

    async def reported_pids() -> list[int] | None:
        line = (await output.readline()).decode()
        if not line:
            raise AssertionError("the launcher exited before reporting its servers")
        return [int(pid) for pid in json.loads(line[5:])] if line.startswith("PIDS ") else None

    try:
        servers = await asyncio.wait_for(poll_until(reported_pids, timeout=30), 30)
        assert servers is not None, "the launcher did not report its servers"
        assert len(servers) > 2, "expected nats, the postmaster and postgres workers"
        # NATS and the postmaster are up; a postgres worker listed at start may have ended
        # on its own since (the startup process, a finished autovacuum worker).
        assert pid_alive(servers[0]) and pid_alive(servers[1])
    finally:
        with contextlib.suppress(ProcessLookupError):
            launcher.send_signal(signal.SIGKILL)
        await asyncio.wait_for(launcher.wait(), 5)

    await assert_pids_gone(servers, timeout=15)


# --- testcontainers ---------------------------------------------------------------------------


async def test_docker_available_answers_false_quickly_without_an_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started = time.monotonic()
    assert docker_available() is False
    assert time.monotonic() - started < 0.5
    monkeypatch.setenv("AGENCY_TEST_BACKEND", "testcontainers")
    assert isinstance(choose_nats(tmp_path / "nats"), NatsServer)
    with pytest.raises(BackendUnavailable, match="no Docker engine"):
        await NatsContainerServer().start()


def test_without_docker_a_requested_container_falls_back_to_the_embedded_server_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AGENCY_TEST_BACKEND", "testcontainers")
    with structlog.testing.capture_logs() as logs:
        nats_server = choose_nats(tmp_path / "nats", sync_interval="1s")
        postgres = choose_postgres(tmp_path / "pg", fsync=False)
    assert isinstance(nats_server, NatsServer)
    assert isinstance(postgres, PostgresServer)
    assert [(e["event"], e["fallback"]) for e in logs] == [
        ("testcontainers_requested_without_docker", "embedded nats-server"),
        ("testcontainers_requested_without_docker", "embedded postgres"),
    ]


# --- Cluster ----------------------------------------------------------------------------------


@pytest.mark.cluster
async def test_cluster_keeps_accepting_r3_writes_through_a_node_loss_and_rejoins(
    tmp_path: Path,
) -> None:
    async with NatsCluster(tmp_path / "cluster") as cluster:
        assert len(cluster.urls) == 3
        assert cluster.url == ",".join(cluster.urls)
        assert await cluster.meta_leader() in {"n1", "n2", "n3"}
        async with nats_client(cluster.urls) as nc:
            js = nc.jetstream()
            config = StreamConfig(
                name="R3", subjects=["r3.>"], num_replicas=3, storage=StorageType.FILE
            )
            await retry_transient(lambda: js.add_stream(config), budget=10)

            async def publish(i: int) -> None:
                # The same Nats-Msg-Id on every retry: a retried write is stored once.
                await retry_transient(
                    lambda: js.publish(
                        f"r3.{i}", b"x", timeout=1.0, headers={"Nats-Msg-Id": f"m{i}"}
                    ),
                    # A leader election usually stalls writes for about 5 s; on a busy
                    # 2-core machine it has been seen to take longer.
                    budget=20,
                )

            for i in range(5):
                await publish(i)

            info = await retry_transient(lambda: js.stream_info("R3"), budget=8)
            assert info.cluster is not None
            leader = info.cluster.leader
            victim = next(i for i, n in enumerate(cluster.nodes) if n.server_name == leader)
            await cluster.kill_node(victim)

            for i in range(5, 10):
                await publish(i)

            await cluster.restart_node(victim)
            assert cluster.nodes[victim].running

            async def rejoined() -> bool | None:
                try:
                    info = await js.stream_info("R3")
                except TRANSIENT_NATS_ERRORS:
                    return None
                cl = info.cluster
                if cl is None or cl.leader is None:
                    return None
                current = {cl.leader} | {r.name for r in cl.replicas or [] if r.current}
                return True if leader in current and len(current) == 3 else None

            await assert_eventually(rejoined, timeout=20, what=f"{leader} rejoins R3")
            info = await retry_transient(lambda: js.stream_info("R3"), budget=8)
            assert info.state.messages == 10


async def test_a_new_embedded_postgres_asks_for_its_generated_password(tmp_path: Path) -> None:
    async with PostgresServer(tmp_path / "pg", fsync=False) as pg:
        password_file = tmp_path / "pg" / "postgres-password"
        assert password_file.stat().st_mode & 0o777 == 0o600
        assert pg.password and pg.password in pg.url and pg.password not in pg.shown_url
        conn = await asyncpg.connect(pg.url, timeout=10)
        await conn.close()
        without = pg.url.replace(":" + pg.password, "")
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(without, timeout=10)
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(without.replace("postgres@", "postgres:wrong@"), timeout=10)


async def test_embedded_postgres_takes_its_shared_buffers_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agency.infra.system import Infrastructure

    monkeypatch.setenv("AGENCY_POSTGRES_SHARED_BUFFERS", "lots")
    with pytest.raises(ValueError, match="AGENCY_POSTGRES_SHARED_BUFFERS='lots'"):
        InfraSettings.from_env()
    monkeypatch.delenv("AGENCY_POSTGRES_SHARED_BUFFERS")
    assert InfraSettings.from_env().pg_shared_buffers == "32MB"

    monkeypatch.setenv("AGENCY_POSTGRES_SHARED_BUFFERS", "16MB")
    for name in ("NATS_URL", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    async with Infrastructure(tmp_path, InfraSettings.from_env()) as urls:
        conn = await asyncpg.connect(urls.database_url)
        try:
            assert await conn.fetchval("SHOW shared_buffers") == "16MB"
        finally:
            await conn.close()


def test_the_nats_profile_port_is_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENCY_NATS_PROFILE_PORT", raising=False)
    assert InfraSettings.from_env().nats_profile_port is None
    monkeypatch.setenv("AGENCY_NATS_PROFILE_PORT", "65432")
    assert InfraSettings.from_env().nats_profile_port == 65432
    monkeypatch.setenv("AGENCY_NATS_PROFILE_PORT", "70000")
    with pytest.raises(ValueError, match="AGENCY_NATS_PROFILE_PORT='70000'"):
        InfraSettings.from_env()
