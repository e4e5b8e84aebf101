"""A supervised child process that never outlives its parent, plus small launch helpers."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO, TypeVar

import structlog

from agency.infra.launch.errors import LaunchError, PortInUse, StopTimeout

log = structlog.get_logger(__name__)

T = TypeVar("T")

_PR_SET_PDEATHSIG = 1
# How long a SIGKILLed process may take to be reaped before we call it stuck.
_KILL_REAP_TIMEOUT = 5.0
# Enough of the log to show the failing lines without reading a huge file.
_LOG_TAIL_BYTES = 16_384
_STDERR = 2


@functools.cache
def _libc() -> ctypes.CDLL:
    # Loaded in the parent: dlopen in a freshly forked child of a threaded process can deadlock.
    return ctypes.CDLL(None, use_errno=True)


def _death_signal_preexec(sig: signal.Signals, parent_pid: int) -> Callable[[], None]:
    prctl = _libc().prctl

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        # The parent may have died between fork and prctl; the signal would then never come.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), sig)

    return preexec


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago; callers retry if someone takes it before they bind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


PORT_ATTEMPTS = 3


async def start_on_free_ports(
    server: str,
    start_once: Callable[[], Awaitable[None]],
    choose_ports: Callable[[], None] | None,
) -> None:
    """`start_once` on ports `choose_ports` picks, picked again (up to `PORT_ATTEMPTS`
    times) while someone takes one before the server binds it; one attempt when the ports
    are fixed (`choose_ports` None)."""
    attempts = PORT_ATTEMPTS if choose_ports is not None else 1
    for attempt in range(1, attempts + 1):
        if choose_ports is not None:
            choose_ports()
        try:
            await start_once()
        except PortInUse:
            if attempt == attempts:
                raise
            log.info("port_taken_retrying", server=server, attempt=attempt)
            continue
        return


def _proc_stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live process; a zombie awaiting its reaper counts as gone."""
    fields = _proc_stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def group_pids(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (Linux /proc); zombies count as gone."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


def child_pids(pid: int) -> list[int]:
    """The direct children of `pid` (Linux /proc)."""
    children: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields is not None and fields[1] == str(pid):
                children.append(int(entry.name))
    return children


async def poll_until(
    check: Callable[[], Awaitable[T | None]], *, timeout: float, interval: float = 0.05
) -> T | None:
    """Call `check` until it returns a value other than None; None once `timeout` has passed.

    `check` raises to abort the wait early (for example when the process has exited).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await check()
        if result is not None:
            return result
        remaining = deadline - loop.time()
        if remaining <= 0:
            return None
        await asyncio.sleep(min(interval, remaining))


class ChildProcess:
    """One child process, its output appended to `log_path` (our own stderr when None), bound
    to our lifetime.

    The child gets `death_signal` when the thread that started it dies (PR_SET_PDEATHSIG), so a
    SIGKILLed parent leaves no orphan. Start it from the event loop's thread, which lives as long
    as the process. Pass `death_signal=None` only when `argv` arranges it itself (for example
    `setpriv --pdeathsig`, needed because a credential change clears the setting).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path | None,
        stop_signal: signal.Signals = signal.SIGTERM,
        death_signal: signal.Signals | None = signal.SIGKILL,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        if not argv:
            raise ValueError("argv must name a program")
        self.name = name
        self.argv = tuple(argv)
        self.log_path = log_path
        self.stop_signal = stop_signal
        self.death_signal = death_signal
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._proc: asyncio.subprocess.Process | None = None
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        if self.running:
            raise LaunchError(f"{self.name} is already running (pid {self.pid})")
        preexec = (
            _death_signal_preexec(self.death_signal, os.getpid())
            if self.death_signal is not None
            else None
        )
        with self._open_log() as log_file:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=subprocess.DEVNULL,
                # Without a log, its output (logs) goes to our stderr, never to our stdout.
                stdout=log_file if log_file is not None else _STDERR,
                stderr=subprocess.STDOUT if log_file is not None else None,
                env=self._env,
                cwd=self._cwd,
                preexec_fn=preexec,
                # Its own session (so its own process group): a Ctrl-C in the terminal
                # reaches only our process, which stops the servers after the services that
                # use them. (`process_group` would do, but uvloop does not take it.)
                start_new_session=True,
            )
        log.debug("child_started", name=self.name, pid=self._proc.pid, argv=self.argv)

    async def wait(self, timeout: float) -> int | None:
        """The exit code, or None if the process is still running after `timeout` seconds."""
        if self._proc is None:
            return None
        try:
            return await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            return None

    async def exited(self) -> int:
        """Wait, unbounded, until the process exits; its exit code."""
        if self._proc is None:
            raise LaunchError(f"{self.name} was never started")
        return await self._proc.wait()

    async def stop(self, timeout: float = 10.0) -> int | None:
        """Ask politely, SIGKILL after `timeout`; idempotent. Returns the exit code."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return self.returncode
        try:
            self._signal(self.stop_signal)
            returncode = await self.wait(timeout)
            if returncode is None:
                log.warning("child_stop_timeout", name=self.name, pid=proc.pid, seconds=timeout)
                returncode = await self._kill_and_reap()
        except asyncio.CancelledError:
            # A cancelled stop must not leave the child running behind our back.
            self._signal(signal.SIGKILL)
            raise
        log.debug("child_stopped", name=self.name, pid=proc.pid, returncode=returncode)
        return returncode

    async def kill(self) -> int | None:
        """SIGKILL and reap (a crash, for tests); idempotent."""
        if not self.running:
            return self.returncode
        return await self._kill_and_reap()

    async def kill_group(self, timeout: float = _KILL_REAP_TIMEOUT) -> None:
        """SIGKILL the child and all it started in its process group (its own session), then
        wait until none of them is left: a program that runs helpers (initdb runs postgres)
        must not leave them writing after it is gone. Idempotent."""
        proc = self._proc
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None and await self.wait(timeout) is None:
            raise StopTimeout(self.name, proc.pid, timeout)

        async def group_gone() -> bool | None:
            return True if not group_pids(proc.pid) else None

        if await poll_until(group_gone, timeout=timeout) is None:
            raise StopTimeout(self.name, proc.pid, timeout)

    def log_tail(self, max_lines: int = 30) -> str:
        """The last lines this run wrote to its log."""
        lines = self.output(_LOG_TAIL_BYTES).splitlines()
        return "\n".join(lines[-max_lines:])

    def output(self, max_bytes: int = 1 << 20) -> str:
        """What this run wrote to its log, at most the last `max_bytes` bytes."""
        if self.log_path is None:
            return ""
        try:
            with self.log_path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(self._log_offset, size - max_bytes))
                data = f.read()
        except FileNotFoundError:
            return ""
        return data.decode("utf-8", errors="replace")

    def _open_log(self) -> contextlib.AbstractContextManager[BinaryIO | None]:
        if self.log_path is None:
            return contextlib.nullcontext()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = self.log_path.open("ab")
        # log_tail shows only this run's output, not an earlier run's.
        self._log_offset = log_file.tell()
        return log_file

    async def _kill_and_reap(self) -> int:
        self._signal(signal.SIGKILL)
        returncode = await self.wait(_KILL_REAP_TIMEOUT)
        if returncode is None:
            raise StopTimeout(self.name, self.pid or -1, _KILL_REAP_TIMEOUT)
        return returncode

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.returncode is None:
            # It may exit between our check and the signal.
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)
