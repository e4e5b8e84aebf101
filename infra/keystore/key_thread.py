"""The key store's connection of a process: an event loop on a daemon thread of its own,
with its own NATS connection and `KeyVault`, so that synchronous decoding can fetch a key.

It connects on first use. A connection attempt is bounded: one that failed is made again
by the next use (at most once a `timeout`), and one still under way after
`CONNECT_ROUNDS` timeouts (the cluster lost a node and is electing its leaders, say) is
given up for a new one, which closes the old when it ends. So a process whose first key
fetch fell in an outage opens keys again once the outage is over, not never.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from nats.errors import Error as NatsError

from agency.infra.jetstream.natsclient import connect as nats_connect
from agency.infra.keystore.operator import KeyWrapper
from agency.infra.keystore.vault import KeyVault

log = structlog.get_logger(__name__)

# A connection attempt still under way after this many timeouts is given up.
CONNECT_ROUNDS = 4


class _Attempt:
    """One connection: its thread, loop, connection and vault, once ready."""

    def __init__(self, owner: KeyThread) -> None:
        self._owner = owner
        self.started = time.monotonic()
        self.ready = threading.Event()
        self.failed_at: float | None = None
        self.failure: BaseException | None = None
        self.abandoned = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.vault: KeyVault | None = None
        self._following: Any = None  # the subscription to destroyed tenant keys
        self.thread = threading.Thread(target=self._main, name="agency-keys", daemon=True)
        self.thread.start()

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        owner = self._owner
        try:
            nc = loop.run_until_complete(
                asyncio.wait_for(self._connect(), owner.timeout * CONNECT_ROUNDS)
            )
        except BaseException as e:  # reported to every caller; the next use tries again
            log.warning("key store connection failed", error=repr(e))
            self.failure, self.failed_at = e, time.monotonic()
            self.ready.set()
            loop.close()
            return
        if self.abandoned:  # a newer attempt took over meanwhile
            loop.run_until_complete(_close(nc, self._following))
            loop.close()
            return
        self.loop = loop
        self.ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_close(nc, self._following))
            loop.close()

    async def _connect(self) -> Any:
        owner = self._owner
        nc = await nats_connect(
            [u.strip() for u in owner.url.split(",") if u.strip()],
            name="agency-keys",
            connect_timeout=owner.timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
        )
        try:
            vault = await KeyVault(nc.jetstream(timeout=owner.timeout), owner.wrapper).open()
            try:
                self._following = await vault.follow_destroyed(owner.destroyed)
            except NatsError as e:  # keys then go within the cipher's `ttl`, not at once
                log.warning("cannot follow the key store's destroyed tenant keys", error=str(e))
        except BaseException:
            await _close(nc, None)
            raise
        self.vault = vault
        return nc

    def stop(self, timeout: float) -> None:
        loop = self.loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        self.thread.join(timeout)


class KeyThread:
    """The process's key store connection: `run(make)` runs `make(vault)`'s coroutine on
    it, within `timeout`."""

    def __init__(
        self,
        url: str,
        wrapper: KeyWrapper,
        timeout: float,
        destroyed: Callable[[str], None] = lambda tenant_id: None,
    ) -> None:
        self.url = url
        self.wrapper = wrapper
        self.timeout = timeout
        self.destroyed = destroyed
        self._attempt: _Attempt | None = None
        self._lock = threading.Lock()

    def run(self, make: Any) -> Any:
        """`make(vault)`'s coroutine run on the key thread; its result, within the timeout."""
        loop, vault = self._started()
        future = asyncio.run_coroutine_threadsafe(make(vault), loop)
        return future.result(self.timeout)

    async def run_async(self, make: Any) -> Any:
        loop, vault = self._started()
        future = asyncio.run_coroutine_threadsafe(make(vault), loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout)

    def submit(self, make: Any) -> concurrent.futures.Future[Any] | None:
        """`make(vault)`'s coroutine started on the key thread without waiting for it: its
        future, or None while the connection is not ready (one is then begun)."""
        attempt = self._current()
        if not attempt.ready.is_set() or attempt.loop is None or attempt.vault is None:
            return None
        return asyncio.run_coroutine_threadsafe(make(attempt.vault), attempt.loop)

    def _current(self) -> _Attempt:
        """The attempt to wait on: the one under way or connected, else a new one."""
        with self._lock:
            attempt, now = self._attempt, time.monotonic()
            if attempt is not None:
                failed = attempt.failed_at is not None and now - attempt.failed_at >= self.timeout
                stuck = (
                    not attempt.ready.is_set()
                    and now - attempt.started >= self.timeout * CONNECT_ROUNDS
                )
                if stuck:
                    attempt.abandoned = True
                    waited = round(now - attempt.started, 1)
                    log.warning("key store connection attempt given up", seconds=waited)
                if failed or stuck:
                    attempt = None
            if attempt is None:
                attempt = self._attempt = _Attempt(self)
            return attempt

    def _started(self) -> tuple[asyncio.AbstractEventLoop, KeyVault]:
        attempt = self._current()
        if not attempt.ready.wait(self.timeout):
            raise TimeoutError(f"the key store did not connect within {self.timeout} s")
        if attempt.failure is not None or attempt.loop is None or attempt.vault is None:
            raise ConnectionError(f"the key store cannot connect: {attempt.failure!r}")
        return attempt.loop, attempt.vault

    def close(self, timeout: float = 2.0) -> None:
        with self._lock:
            attempt, self._attempt = self._attempt, None
        if attempt is not None:
            attempt.abandoned = True
            attempt.stop(timeout)


async def _close(nc: Any, following: Any) -> None:
    try:
        if following is not None:  # its heartbeat and flow control tasks end with it
            with contextlib.suppress(NatsError):  # the connection was closed already
                await asyncio.wait_for(following.unsubscribe(), 2.0)
        await asyncio.wait_for(nc.close(), 2.0)
    except (TimeoutError, OSError):
        log.debug("key store connection did not close in time")
