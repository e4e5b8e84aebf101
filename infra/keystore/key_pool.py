"""Root thread ids whose data key is already stored, held for the tenants that create
threads often, so that a create does not wait on the key store.

A root thread's first event makes its tree's data key: a look at the key store, a write
(fsynced) and a read of the tenant's entry after it, on the key store's own connection
(`key_thread.py`): about 4 of a create's 13 ms over HTTP. A tenant is held as many ids
ready as it took in the last `fresh_for` seconds, less one and at most `size`: made in the
background, their keys stored together (`KeyVault.new_data_keys`: the writes in flight at
once, one read of the tenant's entry after them) and kept by the cipher. They are made
again once `low` or fewer are left, so a tenant creating threads one after the other finds
one ready nearly every time, and the making of them seldom runs beside a create. A tenant
that creates one thread now and then holds none: its creates make their key as any first
append does.

An id is the ULID of the moment it was made, so none is held longer than `fresh_for`:
older ones are let go and their keys erased where they are stored (`erase`). What a
process holds when it closes is erased the same way (bounded); what a killed process held
(at most `size` per tenant) stays in the store, a wrapped key no event was sealed with.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import structlog

from agency.contracts.ids import new_id

log = structlog.get_logger(__name__)

# `make(tenant, threads)` starts making the threads' keys on the key store's connection: the
# future of the ids whose key it stored, None while that connection is not ready.
Make = Callable[[str, list[str]], "Future[list[str]] | None"]
# `erase(tenant, thread)` erases the key of an id never taken (its future, as `Make`).
Erase = Callable[[str, str], "Future[Any] | None"]


@dataclass(slots=True)
class _Held:
    """One tenant's ids ready, oldest first, with when each was minted."""

    ready: deque[tuple[str, float]] = field(default_factory=deque)
    making: int = 0
    window: float = float("-inf")  # when the tenant's current count of takes began
    taken: int = 0  # its takes since


class KeyPool:
    """Ids ready for at most `tenants` tenants (the least recent let go), up to `size` each,
    made again once `low` or fewer are left. Thread-safe: ids are made on the key store's
    thread and taken on the event loop's."""

    def __init__(
        self,
        make: Make,
        erase: Erase,
        *,
        size: int = 8,
        low: int = 2,
        fresh_for: float = 30.0,
        tenants: int = 1_000,
    ) -> None:
        self._make = make
        self._erase = erase
        self._size = size
        self._low = low
        self._fresh_for = fresh_for
        self._max_tenants = tenants
        self._lock = threading.Condition()
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._swept = time.monotonic()
        self._in_flight = 0  # batches being made
        self._closed = False
        self._late: list[tuple[str, str]] = []  # made once closing began

    def take(self, tenant_id: str) -> str:
        """A new root thread id for the tenant: one whose data key is stored, if one is
        ready; else a new ULID. Either way the tenant's ready ids are made up again when
        it takes them often."""
        now = time.monotonic()
        with self._lock:
            held = self._held.get(tenant_id)
            if held is None:
                held = self._held[tenant_id] = _Held()
            self._held.move_to_end(tenant_id)
            stale = self._evicted()
            if now - held.window >= self._fresh_for:
                held.window, held.taken = now, 0
            held.taken += 1
            taken: str | None = None
            while held.ready and taken is None:
                thread_id, minted = held.ready.popleft()
                if now - minted < self._fresh_for:
                    taken = thread_id
                else:
                    stale.append((tenant_id, thread_id))
            wanted = 0 if self._closed else self._wanted(held)
            held.making += wanted
            self._in_flight += bool(wanted)
            if now - self._swept >= self._fresh_for:
                stale += self._sweep(now)
        self._let_go(stale)
        if wanted:
            self._make_some(tenant_id, wanted)
        return taken or new_id()

    def ready(self, tenant_id: str) -> int:
        """How many ids the tenant has ready."""
        with self._lock:
            held = self._held.get(tenant_id)
            return len(held.ready) if held is not None else 0

    def drop_tenant(self, tenant_id: str) -> None:
        """Hold nothing more for the tenant (it was deleted: its keys open no more)."""
        with self._lock:
            self._held.pop(tenant_id, None)

    def close(self, timeout: float) -> None:
        """Make no more, and erase the keys of the ids still ready or being made, waiting
        at most `timeout` s for it (what is left then stays in the store, unused)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True
            self._lock.wait_for(lambda: self._in_flight == 0, timeout)
            left = [(t, i) for t, held in self._held.items() for i, _ in held.ready]
            left += self._late
            self._held.clear()
            self._late.clear()
        futures = [f for f in (self._erase(t, i) for t, i in left) if f is not None]
        for future in futures:
            try:
                future.result(max(deadline - time.monotonic(), 0.0))
            except Exception as e:
                log.debug("a key made ahead was not erased", error=repr(e))
                return

    def _wanted(self, held: _Held) -> int:
        """How many more to make: none while more than `low` are ready or on the way; else
        up to as many as the tenant took in its current window, less one, and `size`."""
        have = len(held.ready) + held.making
        if have > self._low:
            return 0
        return max(min(self._size, held.taken - 1) - have, 0)

    def _make_some(self, tenant_id: str, count: int) -> None:
        minted = time.monotonic()
        ids = [new_id() for _ in range(count)]
        try:
            future = self._make(tenant_id, ids)
        except Exception as e:  # a take never fails for what is only a head start
            log.debug("keys were not made ahead", error=repr(e))
            future = None
        if future is None:
            self._made(tenant_id, ids, minted, None)
            return
        future.add_done_callback(lambda f: self._made(tenant_id, ids, minted, f))

    def _made(
        self, tenant_id: str, ids: list[str], minted: float, future: Future[list[str]] | None
    ) -> None:
        failed = future is None or future.cancelled() or future.exception() is not None
        stored = [] if future is None or failed else future.result()
        with self._lock:
            self._in_flight -= 1
            held = self._held.get(tenant_id)
            if held is not None:
                held.making = max(held.making - len(ids), 0)
            if self._closed:
                self._late += [(tenant_id, thread_id) for thread_id in stored]
            elif held is not None:
                held.ready.extend((thread_id, minted) for thread_id in stored)
            self._lock.notify_all()
        if future is not None and failed and not future.cancelled():
            log.debug("keys were not made ahead", error=repr(future.exception()))
        elif held is None and not self._closed:  # the tenant was let go meanwhile
            self._let_go([(tenant_id, thread_id) for thread_id in stored])

    def _evicted(self) -> list[tuple[str, str]]:
        stale: list[tuple[str, str]] = []
        while len(self._held) > self._max_tenants:
            tenant_id, held = self._held.popitem(last=False)
            stale += [(tenant_id, thread_id) for thread_id, _ in held.ready]
        return stale

    def _sweep(self, now: float) -> list[tuple[str, str]]:
        """The ids past `fresh_for`, taken out; tenants holding nothing forgotten."""
        self._swept = now
        stale: list[tuple[str, str]] = []
        for tenant_id, held in list(self._held.items()):
            while held.ready and now - held.ready[0][1] >= self._fresh_for:
                stale.append((tenant_id, held.ready.popleft()[0]))
            if not held.ready and not held.making and now - held.window >= self._fresh_for:
                del self._held[tenant_id]
        return stale

    def _let_go(self, stale: list[tuple[str, str]]) -> None:
        for tenant_id, thread_id in stale:
            future = self._erase(tenant_id, thread_id)
            if future is not None:
                future.add_done_callback(_log_failure)


def _log_failure(future: Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("a key made ahead was not erased", error=repr(future.exception()))
