"""The spawns a coordinator has under way, and the children whose first invoke it sent.

A child's `thread.created` comes back while its spawn is still linking it and sending its
first invoke: the coordinator then has nothing to adopt. Only a child whose spawn went no
further than its creation (its delivery dead-lettered, its process gone), or whose first
invoke went out long before the child existed (the runtime dead-letters an invoke of a
thread still missing after some 10 s: its creation was held up by an outage), is started
from `thread.created` (`Spawner.adopt`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict

# How many children's first invokes are remembered; the oldest are forgotten.
KEPT = 10_000
# A first invoke sent at most this long before its child was created is still being
# retried by the runtime (which hands it back for at least 11 s before dead-lettering it).
TRUSTED_FOR = 5.0


class Spawns:
    def __init__(self, kept: int = KEPT) -> None:
        self._under_way: dict[str, asyncio.Event] = {}
        self._invoked: OrderedDict[str, float] = OrderedDict()  # when each invoke went out
        self._kept = kept

    def begin(self, child: str) -> None:
        """A spawn of `child` starts (before the child is created)."""
        self._under_way.setdefault(child, asyncio.Event())

    def end(self, child: str, *, invoked: bool) -> None:
        """The spawn of `child` is over; `invoked`: its first invoke went out."""
        if invoked:
            self._invoked[child] = time.monotonic()
            self._invoked.move_to_end(child)
            while len(self._invoked) > self._kept:
                self._invoked.popitem(last=False)
        done = self._under_way.pop(child, None)
        if done is not None:
            done.set()

    async def invoked(self, child: str, timeout: float) -> bool:
        """Whether a spawn here sent `child`'s first invoke, once one under way is over
        (waited for `timeout` seconds at most), recently enough that the runtime is still
        trying it (`TRUSTED_FOR`)."""
        under_way = self._under_way.get(child)
        if under_way is not None:
            try:
                await asyncio.wait_for(under_way.wait(), timeout)
            except TimeoutError:
                return False
        sent = self._invoked.get(child)
        return sent is not None and time.monotonic() - sent <= TRUSTED_FOR
