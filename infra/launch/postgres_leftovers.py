"""What a PostgreSQL that died leaves behind: a crashed launcher's postmaster still serving
the data directory, and a dead postmaster's workers, which keep its shared memory and block
a restart. Both are stopped before a start."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import structlog

from agency.infra.launch.errors import LaunchError, StopTimeout
from agency.infra.launch.process import child_pids, pid_alive, poll_until

log = structlog.get_logger(__name__)

LEFTOVER_KILL_WAIT = 5.0


async def reap_orphans(pids: list[int]) -> None:
    """Wait for a dead postmaster's workers; they keep its shared memory and block a restart."""

    async def gone() -> bool | None:
        return True if not any(pid_alive(pid) for pid in pids) else None

    if not pids or await poll_until(gone, timeout=LEFTOVER_KILL_WAIT) is not None:
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if await poll_until(gone, timeout=LEFTOVER_KILL_WAIT) is None:
        survivor = next(pid for pid in pids if pid_alive(pid))
        raise StopTimeout("postgres worker", survivor, LEFTOVER_KILL_WAIT)


def _is_postgres(pid: int) -> bool:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return Path(os.fsdecode(argv0)).name == "postgres"


async def stop_leftover(pgdata: Path, timeout: float) -> None:
    """Stop a postmaster still serving `pgdata` from a crashed launcher, so ours can start."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return
    if len(lines) < 2 or not lines[0].strip().isdigit():
        return
    pid = int(lines[0].strip())
    if Path(lines[1]) != pgdata or not pid_alive(pid) or not _is_postgres(pid):
        # A stale pid file: PostgreSQL itself recognises and replaces it.
        return
    log.warning("postgres_leftover_stopping", pid=pid, pgdata=str(pgdata))
    children = child_pids(pid)

    async def postmaster_gone() -> bool | None:
        return True if not pid_alive(pid) else None

    try:
        os.kill(pid, signal.SIGINT)
        if await poll_until(postmaster_gone, timeout=timeout) is None:
            os.kill(pid, signal.SIGKILL)
            if await poll_until(postmaster_gone, timeout=LEFTOVER_KILL_WAIT) is None:
                raise StopTimeout("leftover postgres", pid, LEFTOVER_KILL_WAIT)
    except ProcessLookupError:
        pass
    except PermissionError as e:
        raise LaunchError(
            f"a postgres (pid {pid}) of another user still serves {pgdata}; stop it first"
        ) from e
    await reap_orphans(children)
