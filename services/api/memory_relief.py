"""Memory taken during an overload is given back once it has passed.

What a flood leaves behind in the API process, and what is done about each:

- Freed objects in the allocator's arenas: CPython frees them, but glibc's malloc keeps
  the pages for the next allocation, so the resident size stays at its peak. Once the
  admission has refused nothing for `quiet_for` seconds after refusing something (the
  overload is over), the process collects its garbage and asks malloc to return its free
  pages (`malloc_trim(0)`, glibc only; elsewhere only the collection runs). Once per
  overload, so a steady load pays nothing.
- Large buffers (request bodies near the invoke's 256 KB limit, the events read back with
  them): glibc serves a block over its mmap threshold (128 KB) with pages of its own and
  unmaps them when freed, but raises the threshold to the size of each such block freed,
  after which those blocks come from the heap and fragment it. The threshold is fixed at
  128 KB when relief starts (`mallopt`), so they are always given back when freed.
- The caches of folded threads (bounded by count): the threads a flood made stay folded,
  their messages with them, until newer ones push them out. The relief drops those at
  rest (`shed`): read back from the log when next used.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import math
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import structlog

from agency.services.tenancy.admission import Admission

log = structlog.get_logger(__name__)


def _libc(function: str, argtypes: list[Any]) -> Any | None:
    """The C library's `function`, its arguments typed, or None where it has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        found = getattr(ctypes.CDLL(name), function)
    except (OSError, AttributeError):
        return None
    found.argtypes = argtypes
    return found


def _malloc_trim() -> Callable[[], None] | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none."""
    trim = _libc("malloc_trim", [ctypes.c_size_t])
    if trim is None:
        return None

    def trimmed() -> None:
        trim(0)

    return trimmed


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024


def fix_mmap_threshold(size: int = MMAP_THRESHOLD) -> bool:
    """Keep glibc's mmap threshold at `size` (its dynamic growth off); False elsewhere."""
    mallopt = _libc("mallopt", [ctypes.c_int, ctypes.c_int])
    return mallopt is not None and bool(mallopt(_M_MMAP_THRESHOLD, size))


def rss_mb() -> float:
    """The process's resident size in MB (Linux), 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class MemoryRelief:
    """Gives memory back after each overload the admission saw (`relieving`)."""

    def __init__(
        self,
        admission: Admission,
        *,
        quiet_for: float = 5.0,
        interval: float = 1.0,
        shed: Sequence[Callable[[], int]] = (),
    ) -> None:
        self._admission = admission
        # Caches to empty after an overload; each says how many entries it dropped.
        self._shed = tuple(shed)
        self._quiet_for = quiet_for
        self._interval = interval
        # The refusal the last relief came after: the next is due after a later one.
        self._relieved = -math.inf
        self._trim = _malloc_trim()
        # How many times memory was given back (what the log says, for tests and metrics).
        self.times = 0

    def due(self, now: float) -> bool:
        refused = self._admission.last_refused
        return self._relieved < refused and now - refused >= self._quiet_for

    async def relieve(self) -> None:
        self._relieved = self._admission.last_refused
        before = rss_mb()
        shed = sum(drop() for drop in self._shed)
        gc.collect()
        if self._trim is not None:
            await asyncio.to_thread(self._trim)
        self.times += 1
        log.info("memory given back after an overload", rss_mb_before=round(before),
                 rss_mb_after=round(rss_mb()), cached_dropped=shed)  # fmt: skip

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)  # a period, not a wait for anything
            if self.due(time.monotonic()):
                await self.relieve()

    @contextlib.asynccontextmanager
    async def relieving(self) -> AsyncIterator[None]:
        """Watch for the end of each overload while the app runs."""
        fix_mmap_threshold()
        task = asyncio.create_task(self._run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, timeout=5)
