"""How a code agent's effects reach the log: one ordered appender per run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from contracts.events import AnyEvent, ReplyDelta
from services.runtime.state import ThreadState

if TYPE_CHECKING:
    from services.runtime.loop import ThreadDriver

_CONFLICT_ATTEMPTS = 100


class Emitter:
    """Appends one code run's events in order; reply events wait in `pending` for the next
    append (or the periodic flush)."""

    def __init__(self, driver: ThreadDriver, state: ThreadState, run_id: str) -> None:
        self._driver = driver
        self.state = state
        self.run_id = run_id
        self.pending: list[AnyEvent] = []
        self.aborted = asyncio.Event()
        self._lock = asyncio.Lock()

    def queue(self, event: AnyEvent) -> None:
        last = self.pending[-1] if self.pending else None
        if isinstance(event, ReplyDelta) and isinstance(last, ReplyDelta):
            self.pending[-1] = ReplyDelta(run_id=self.run_id, text=last.text + event.text)
        else:
            self.pending.append(event)

    async def emit(self, events: Sequence[AnyEvent] = ()) -> ThreadState:
        """Append what is pending and `events`. Raises `CancelledError` (after setting
        `aborted`) when the run stopped running meanwhile."""
        async with self._lock:
            if self.aborted.is_set():
                raise asyncio.CancelledError
            batch = [*self.pending, *events]
            self.pending = []
            if not batch:
                return self.state
            for _ in range(_CONFLICT_ATTEMPTS):
                state, appended = await self._driver.append(self.state, batch)
                self.state = state
                if appended:
                    return state
                run = state.run(self.run_id)
                if run is None or run.status != "running":
                    self.aborted.set()
                    raise asyncio.CancelledError
            raise RuntimeError(f"run {self.run_id}: could not append after repeated conflicts")
