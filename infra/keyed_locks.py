"""One asyncio lock per key, kept only while someone holds it or waits for it.

A process that serializes work per thread or per aggregate meets every key it ever saw;
a plain dict of locks grows by one lock per key for the life of the process. Here the
map holds its locks weakly: whoever holds a lock, or waits on it, keeps it alive, so two
tasks with the same key always share one lock, and a key nobody is using costs nothing.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[K, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock(self, key: K) -> asyncio.Lock:
        """The key's lock; keep the returned object while using it (`async with`)."""
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def held(self, key: K) -> bool:
        """Whether someone holds the key's lock right now."""
        lock = self._locks.get(key)
        return lock is not None and lock.locked()

    def __len__(self) -> int:
        return len(self._locks)
