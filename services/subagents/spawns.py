"""The spawns a coordinator has under way, and the children whose first invoke it sent.

A child's `thread.created` comes back while its spawn is still linking it and sending its
first invoke: the coordinator then has nothing to adopt. Only a child whose spawn went no
further than its creation (its delivery dead-lettered, its process gone) is started from
`thread.created` (`Spawner.adopt`).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

# How many children's first invokes are remembered; the oldest are forgotten.
KEPT = 10_000


class Spawns:
    def __init__(self, kept: int = KEPT) -> None:
        self._under_way: dict[str, asyncio.Event] = {}
        self._invoked: OrderedDict[str, None] = OrderedDict()
        self._kept = kept

    def begin(self, child: str) -> None:
        """A spawn of `child` starts (before the child is created)."""
        self._under_way.setdefault(child, asyncio.Event())

    def end(self, child: str, *, invoked: bool) -> None:
        """The spawn of `child` is over; `invoked`: its first invoke went out."""
        if invoked:
            self._invoked[child] = None
            self._invoked.move_to_end(child)
            while len(self._invoked) > self._kept:
                self._invoked.popitem(last=False)
        done = self._under_way.pop(child, None)
        if done is not None:
            done.set()

    async def invoked(self, child: str, timeout: float) -> bool:
        """Whether a spawn here sent `child`'s first invoke, once one under way is over
        (waited for `timeout` seconds at most)."""
        under_way = self._under_way.get(child)
        if under_way is not None:
            try:
                await asyncio.wait_for(under_way.wait(), timeout)
            except TimeoutError:
                return False
        return child in self._invoked
