"""What every server Agency starts shares: `async with` starts it and stops it (the stop
shielded, so a cancelled test or command still leaves no server behind), and, for one run
as a child process, its pid, whether it runs and the tail of its log."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from typing import Self

from agency.infra.launch.errors import StartTimeout
from agency.infra.launch.process import ChildProcess, poll_until


class Server(ABC):
    """A server with `start()` and an idempotent `stop()`, used as an async context manager."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.shield(self.stop())


class ProcessServer(Server):
    """A server run as a child process of this one (`_proc` once started)."""

    _proc: ChildProcess | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.running

    def log_tail(self, max_lines: int = 30) -> str:
        return self._proc.log_tail(max_lines) if self._proc is not None else ""

    async def kill(self) -> None:
        """SIGKILL, as in a crash; idempotent."""
        if self._proc is not None:
            await self._proc.kill()

    @abstractmethod
    async def _ready_check(self) -> bool | None:
        """True once the server answers; None while it starts; raises if it exited."""

    async def _start_until_ready(self, proc: ChildProcess, timeout: float, interval: float) -> None:
        """Start `proc` as this server and wait for `_ready_check`; a start that fails or
        times out (`StartTimeout`, with the log's tail) kills it first, shielded."""
        self._proc = proc
        await proc.start()
        try:
            ready = await poll_until(self._ready_check, timeout=timeout, interval=interval)
        except BaseException:
            await asyncio.shield(self.kill())
            raise
        if ready is None:
            tail = proc.log_tail()
            await asyncio.shield(self.kill())
            raise StartTimeout(proc.name, timeout, tail)
