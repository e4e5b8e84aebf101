"""The process's payload cipher (`contracts.sealed.PayloadCipher`) over the key store.

Decoding is synchronous and happens everywhere events are read, so the cipher keeps the
data keys it has opened in memory and fetches a missing one through a connection of its
own, on a thread of its own (`_KeyThread`): a read in the process's event loop waits for
that one request (bounded by `fetch_timeout`), once per tree and `ttl`. A key destroyed by
another process stops opening here within `ttl`; reads of a deleted thread are refused
earlier, from its `thread.deleted` event.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine
from typing import Any

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agency.contracts.errors import DecodeError
from agency.contracts.opened import OPENED
from agency.contracts.sealed import PayloadErased
from agency.infra.jetstream.natsclient import connect as nats_connect
from agency.infra.keystore.operator import NONCE_BYTES, KeyWrapper
from agency.infra.keystore.vault import KeyVault, TenantKeyMissing

log = structlog.get_logger(__name__)


class _KeyThread:
    """An event loop on a daemon thread with its own NATS connection and `KeyVault`."""

    def __init__(self, url: str, wrapper: KeyWrapper, timeout: float) -> None:
        self._url = url
        self._wrapper = wrapper
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._vault: KeyVault | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def run(self, make: Any) -> Any:
        """`make(vault)`'s coroutine run on the key thread; its result, within the timeout."""
        loop, vault = self._started()
        future = asyncio.run_coroutine_threadsafe(make(vault), loop)
        return future.result(self._timeout)

    async def run_async(self, make: Any) -> Any:
        loop, vault = self._started()
        future = asyncio.run_coroutine_threadsafe(make(vault), loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), self._timeout)

    def _started(self) -> tuple[asyncio.AbstractEventLoop, KeyVault]:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="agency-keys", daemon=True)
                self._thread.start()
        if not self._ready.wait(self._timeout):
            raise TimeoutError(f"the key store did not connect within {self._timeout} s")
        if self._failure is not None or self._loop is None or self._vault is None:
            raise ConnectionError(f"the key store cannot connect: {self._failure}")
        return self._loop, self._vault

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            nc = loop.run_until_complete(self._connect())
        except Exception as e:  # reported to every caller by `_started`
            self._failure = e
            self._ready.set()
            loop.close()
            return
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(_close(nc))
            loop.close()

    async def _connect(self) -> Any:
        nc = await nats_connect(
            [u.strip() for u in self._url.split(",") if u.strip()],
            name="agency-keys",
            connect_timeout=self._timeout,
            max_reconnect_attempts=-1,
            reconnect_time_wait=0.5,
        )
        self._vault = await KeyVault(nc.jetstream(timeout=self._timeout), self._wrapper).open()
        return nc

    def close(self, timeout: float = 2.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout)


async def _close(nc: Any) -> None:
    try:
        await asyncio.wait_for(nc.close(), 2.0)
    except (TimeoutError, OSError):
        log.debug("key store connection did not close in time")


class ThreadCipher:
    """AES-GCM with a thread tree's data key; keys held `ttl` seconds once opened, at most
    `max_keys` of them (the least recently used dropped first), and dropped at once when a
    tree's `thread.deleted` is read (`forget`)."""

    def __init__(
        self,
        url: str,
        wrapper: KeyWrapper,
        *,
        ttl: float = 300.0,
        fetch_timeout: float = 5.0,
        max_keys: int = 10_000,
    ) -> None:
        self.url = url
        self._keys = _KeyThread(url, wrapper, fetch_timeout)
        self._ttl = ttl
        self._max_keys = max_keys
        self._cache: OrderedDict[tuple[str, str], tuple[AESGCM, float]] = OrderedDict()

    async def prepare(self, tenant_id: str, key_id: str) -> None:
        if self._cached(tenant_id, key_id) is not None:
            return
        key = await self._keys.run_async(
            lambda vault: vault.data_key(tenant_id, key_id, create=True)
        )
        self._remember(tenant_id, key_id, key)

    def seal(self, tenant_id: str, key_id: str, plaintext: bytes, aad: bytes) -> bytes:
        aes = self._aes(tenant_id, key_id, create=True)
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce + aes.encrypt(nonce, plaintext, aad)

    def open(self, tenant_id: str, key_id: str, ciphertext: bytes, aad: bytes) -> bytes:
        aes = self._aes(tenant_id, key_id, create=False)
        try:
            return aes.decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], aad)
        except InvalidTag:
            raise DecodeError("sealed payload", "it does not open with its thread's key") from None

    def forget(self, tenant_id: str, key_id: str) -> None:
        """Drop the key from memory (after destroying it), and the tree's events opened
        with it (`contracts.opened`)."""
        self._cache.pop((tenant_id, key_id), None)
        OPENED.forget(tenant_id, key_id)

    async def destroy(self, tenant_id: str, key_id: str) -> bool:
        """Destroy the tree's data key in the store, and here."""
        self.forget(tenant_id, key_id)
        destroyed: bool = await self._keys.run_async(lambda vault: vault.destroy(tenant_id, key_id))
        return destroyed

    async def destroy_tenant(self, tenant_id: str) -> bool:
        """Destroy the tenant's key in the store (the tenant is deleted), and its data keys
        here: none of its data keys opens again."""
        for held in [k for k in self._cache if k[0] == tenant_id]:
            self._cache.pop(held, None)
        destroyed: bool = await self._keys.run_async(lambda vault: vault.destroy_tenant(tenant_id))
        return destroyed

    def vault_call(self, make: Any) -> Coroutine[Any, Any, Any]:
        """Run `make(vault)` on the key store's connection (rotation, tools)."""
        return self._keys.run_async(make)

    def close(self) -> None:
        self._keys.close()

    def _aes(self, tenant_id: str, key_id: str, *, create: bool) -> AESGCM:
        aes = self._cached(tenant_id, key_id)
        if aes is not None:
            return aes
        try:
            key = self._keys.run(lambda vault: vault.data_key(tenant_id, key_id, create=create))
        except TenantKeyMissing as e:
            # The store lost the key that wraps this one: the event cannot be opened, and
            # a reader takes it as undecodable, with this reason, rather than stop.
            raise DecodeError("sealed payload", str(e)) from None
        if key is None:
            raise PayloadErased(tenant_id, key_id)
        return self._remember(tenant_id, key_id, key)

    def _cached(self, tenant_id: str, key_id: str) -> AESGCM | None:
        found = self._cache.get((tenant_id, key_id))
        if found is None or found[1] < time.monotonic():
            return None
        self._cache.move_to_end((tenant_id, key_id))
        return found[0]

    def _remember(self, tenant_id: str, key_id: str, key: bytes | None) -> AESGCM:
        if key is None:
            raise PayloadErased(tenant_id, key_id)
        aes = AESGCM(key)
        self._cache[(tenant_id, key_id)] = (aes, time.monotonic() + self._ttl)
        self._cache.move_to_end((tenant_id, key_id))
        while len(self._cache) > self._max_keys:
            self._cache.popitem(last=False)
        return aes
