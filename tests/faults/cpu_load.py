"""A competing busy process on every core, for as long as a test runs its system under it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator

_SPIN = "while True: pass"


@contextlib.asynccontextmanager
async def busy_cores(cores: int | None = None) -> AsyncIterator[int]:
    """`cores` processes (one per core by default) spinning at full speed inside; each is
    killed on the way out. Yields how many run."""
    count = cores or os.cpu_count() or 1
    procs: list[asyncio.subprocess.Process] = []
    try:
        for _ in range(count):
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable, "-c", _SPIN, stdin=asyncio.subprocess.DEVNULL
                )
            )
        yield count
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
        for proc in procs:
            await asyncio.wait_for(proc.wait(), timeout=10)
