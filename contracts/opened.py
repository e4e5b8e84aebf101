"""Sealed events already opened in this process, so each is opened once, not once per reader.

In one process a thread's event is read by many: the projector, the SSE stream, the event
workers, the metrics and fairness listeners, and every read of the thread's history (a
run's end reads it whole). Opening a sealed event (`codec.decode_event`) costs several
times decoding one in clear; the cache answers a stored event's exact bytes with the
envelope they opened to, shared and never to be changed by a reader.

What it holds is plaintext, so it is bounded and dropped as the keys are:
- at most `entries` events and `size` stored bytes, the least recently read going first;
- each for `ttl` seconds from its opening, no longer than the cipher holds a data key, so
  a key destroyed in another process stops answering here within that time too;
- a tree's events at once when its key is destroyed here (`ThreadCipher.forget`) or a
  `thread.deleted` naming the tree is read (`codec.decode_event`);
- a tenant's events at once when its key is destroyed, here or in another process (the
  cipher follows the key store's tenant entries: `ThreadCipher`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from agency.contracts.envelope import Envelope

Tree = tuple[str, str]  # (tenant id, data key id: the tree's root thread)


class _Entry(NamedTuple):
    envelope: Envelope
    tree: Tree
    expires: float


class OpenedEvents:
    """Stored bytes of sealed events → their opened envelopes, bounded (see the module)."""

    def __init__(
        self,
        *,
        entries: int = 4096,
        size: int = 16 * 1024 * 1024,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if entries < 1 or size < 1 or ttl <= 0:
            raise ValueError("entries, size and ttl must be positive")
        self._max_entries = entries
        self._max_size = size
        self._ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._trees: dict[Tree, set[bytes]] = {}
        self._size = 0
        # Decoding also happens on the key store's and tools' threads.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size(self) -> int:
        """The stored bytes held (the keys' lengths)."""
        return self._size

    def get(self, data: bytes) -> Envelope | None:
        with self._lock:
            entry = self._entries.get(data)
            if entry is None:
                return None
            if entry.expires < self._clock():
                self._drop(data)
                return None
            self._entries.move_to_end(data)
            return entry.envelope

    def put(self, data: bytes, envelope: Envelope, tenant_id: str, key_id: str) -> None:
        if len(data) > self._max_size:
            return
        data = bytes(data)
        tree = (tenant_id, key_id)
        with self._lock:
            if data in self._entries:
                self._drop(data)
            self._entries[data] = _Entry(envelope, tree, self._clock() + self._ttl)
            self._trees.setdefault(tree, set()).add(data)
            self._size += len(data)
            while len(self._entries) > self._max_entries or self._size > self._max_size:
                self._drop(next(iter(self._entries)))

    def forget(self, tenant_id: str, key_id: str) -> None:
        """Drop the tree's events (its key destroyed, or the thread deleted)."""
        with self._lock:
            for data in self._trees.pop((tenant_id, key_id), set()):
                entry = self._entries.pop(data, None)
                if entry is not None:
                    self._size -= len(data)

    def forget_tenant(self, tenant_id: str) -> None:
        """Drop every tree's events of the tenant (its key destroyed: it was deleted)."""
        with self._lock:
            for tree in [t for t in self._trees if t[0] == tenant_id]:
                for data in self._trees.pop(tree):
                    if self._entries.pop(data, None) is not None:
                        self._size -= len(data)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._trees.clear()
            self._size = 0

    def shed(self) -> int:
        """Drop every event held (after an overload, with the other caches); how many."""
        with self._lock:
            count = len(self._entries)
        self.clear()
        return count

    def _drop(self, data: bytes) -> None:
        entry = self._entries.pop(data)
        self._size -= len(data)
        held = self._trees.get(entry.tree)
        if held is not None:
            held.discard(data)
            if not held:
                del self._trees[entry.tree]


# The process's cache, used by `codec.decode_event`.
OPENED = OpenedEvents()
