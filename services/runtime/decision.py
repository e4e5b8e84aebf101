"""A command's decision stored by the drive it starts: one append, not two.

An approval for a parked run used to be stored on its own (`hitl.resume`), then driven:
the run resumed, the approved calls answered and the next model call opened, in a second
append. When the worker that decided it can drive the thread at once (it takes the
thread's lease), the decision instead becomes the drive's first pending events, and the
drive's first append stores it together with what follows from it, under the command's
idempotency key and as caused by the command (`RuntimeService.handle_command`).

The command waits on `stored`: the thread's state once that append landed, or None when
it did not (another writer moved the thread, the lease is held elsewhere, the drive
failed first). With None, the command is decided again and stored the usual way; when the
lease was held elsewhere, only once the holder moved the thread or let go (bounded): the
holder may be storing a twin of this command, and a decision stored alone first would
make the holder's append, and the model call made beside it, a loss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from agency.contracts.events import AnyEvent
from agency.contracts.records import Position
from agency.domain.thread_state import ThreadState


def _future() -> asyncio.Future[ThreadState | None]:
    return asyncio.get_running_loop().create_future()


@dataclass(slots=True)
class Decision:
    events: Sequence[AnyEvent]
    causation_id: str
    idempotency_key: str | None
    stored: asyncio.Future[ThreadState | None] = field(default_factory=_future)
    # Where the thread stood when `events` were decided: a drive that finds the log past
    # it does not store them (None: no check).
    decided_at: Position | None = None
    # Another worker held the thread's lease: it is driving the thread, perhaps storing
    # this very command delivered twice (or a twin sent under another key).
    leased_elsewhere: bool = False
    # Decided on a held state the log had moved past: the command decides again.
    stale: bool = False

    def landed(self, state: ThreadState) -> None:
        """The append that carried the decision is in the log; `state` is after it."""
        if not self.stored.done():
            self.stored.set_result(state)

    def behind(self, state: ThreadState) -> bool:
        """Whether `state`, the log's, has moved past where the decision was made; if so
        it is marked stale and missed."""
        if self.decided_at is None or state.position == self.decided_at:
            return False
        self.stale = True
        self.missed()
        return True

    def missed(self) -> None:
        """The decision was not stored by the drive (whatever stopped it): the command
        stores it the usual way. A no-op once it landed."""
        if not self.stored.done():
            self.stored.set_result(None)
