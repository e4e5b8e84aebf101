"""The process's payload cipher (`contracts.sealed.PayloadCipher`) over the key store.

Decoding is synchronous and happens everywhere events are read, so the cipher keeps the
data keys it has opened in memory and fetches a missing one through a connection of its
own, on a thread of its own (`key_thread.py`): a read in the process's event loop waits for
that one request (bounded by `fetch_timeout`), once per tree and `ttl`. A data key
destroyed by another process stops opening here within `ttl`; reads of a deleted thread
are refused earlier, from its `thread.deleted` event. A deleted tenant's keys (its tenant
key, and every data key of it held here, with the events they opened) are dropped as soon
as the key thread sees its tenant key destroyed in the store, by whichever process
(`KeyVault.follow_destroyed`); should it miss that, within `ttl` all the same.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agency.contracts.errors import DecodeError
from agency.contracts.opened import OPENED
from agency.contracts.sealed import PayloadErased
from agency.infra.jetstream.errors import is_transient
from agency.infra.keystore.key_pool import KeyPool
from agency.infra.keystore.key_thread import KeyThread
from agency.infra.keystore.operator import NONCE_BYTES, KeyWrapper
from agency.infra.keystore.vault import KeyVault, TenantKeyDestroyed, TenantKeyMissing
from agency.infra.retry import RetryPolicy

log = structlog.get_logger(__name__)

# A key's destruction (a thread's or a tenant's deletion) asked again while the key store
# does not answer (each ask bounded by `fetch_timeout`): a repeat is harmless.
DESTROY_RETRY = RetryPolicy(attempts=4, timeout=30.0, wait_initial=0.2, wait_max=2.0)


class ThreadCipher:
    """AES-GCM with a thread tree's data key; keys held `ttl` seconds once opened, at most
    `max_keys` of them (the least recently used dropped first), and dropped at once when a
    tree's `thread.deleted` is read (`forget`) or its tenant's key is destroyed here or
    elsewhere (`tenant_destroyed`, from the key thread)."""

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
        self._keys = KeyThread(url, wrapper, fetch_timeout, self.tenant_destroyed)
        self._ttl = ttl
        self._max_keys = max_keys
        self._cache: OrderedDict[tuple[str, str], tuple[AESGCM, float]] = OrderedDict()
        # The cache is changed by the key thread too (`tenant_destroyed`).
        self._lock = threading.Lock()
        # Tenants whose key was destroyed since this process started: nothing of theirs
        # is held or opened here again (a tenant id is never used again).
        self._destroyed: set[str] = set()
        self._pool = KeyPool(self._make_ahead, self._erase_unused)

    @property
    def pool(self) -> KeyPool:
        return self._pool

    def new_root_id(self, tenant_id: str) -> str:
        """A new root thread's id, its data key made already where one is ready for the
        tenant (`key_pool.py`)."""
        return self._pool.take(tenant_id)

    async def prepare(self, tenant_id: str, key_id: str, *, fresh: bool = False) -> None:
        if self._cached(tenant_id, key_id) is not None:
            return
        key = await self._keys.run_async(
            lambda vault: vault.data_key(tenant_id, key_id, create=True, fresh=fresh)
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
        with self._lock:
            self._cache.pop((tenant_id, key_id), None)
        OPENED.forget(tenant_id, key_id)

    def tenant_destroyed(self, tenant_id: str) -> None:
        """The tenant's key was destroyed (it was deleted): drop its data keys held here
        and the events they opened (`contracts.opened`); none of its keys is held again."""
        with self._lock:
            first = tenant_id not in self._destroyed
            self._destroyed.add(tenant_id)
            for held in [k for k in self._cache if k[0] == tenant_id]:
                del self._cache[held]
        self._pool.drop_tenant(tenant_id)
        OPENED.forget_tenant(tenant_id)
        if first:
            log.info("deleted tenant's keys dropped", tenant_id=tenant_id)

    async def destroy(self, tenant_id: str, key_id: str) -> bool:
        """Destroy the tree's data key in the store, and here. False when it was gone
        already (or an ask that timed out had destroyed it: `DESTROY_RETRY`)."""
        self.forget(tenant_id, key_id)
        destroyed: bool = await DESTROY_RETRY.call(
            is_transient, self._keys.run_async, lambda vault: vault.destroy(tenant_id, key_id)
        )
        return destroyed

    async def destroy_tenant(self, tenant_id: str) -> bool:
        """Destroy the tenant's key in the store (the tenant is deleted), and its data keys
        here: none of its data keys opens again (in another process, once its key thread
        sees the entry destroyed). False as `destroy` says."""
        self.tenant_destroyed(tenant_id)
        destroyed: bool = await DESTROY_RETRY.call(
            is_transient, self._keys.run_async, lambda vault: vault.destroy_tenant(tenant_id)
        )
        return destroyed

    def vault_call(self, make: Any) -> Coroutine[Any, Any, Any]:
        """Run `make(vault)` on the key store's connection (rotation, tools)."""
        return self._keys.run_async(make)

    def close(self) -> None:
        self._pool.close(timeout=1.0)
        self._keys.close()

    def _make_ahead(self, tenant_id: str, thread_ids: list[str]) -> Future[list[str]] | None:
        async def made(vault: KeyVault) -> list[str]:
            keys = await vault.new_data_keys(tenant_id, thread_ids)
            for thread_id, key in keys.items():
                self._remember(tenant_id, thread_id, key)
            return list(keys)

        return self._keys.submit(made)

    def _erase_unused(self, tenant_id: str, thread_id: str) -> Future[int] | None:
        with self._lock:
            self._cache.pop((tenant_id, thread_id), None)
        return self._keys.submit(lambda vault: vault.erase_unused(tenant_id, thread_id))

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
        with self._lock:
            if tenant_id in self._destroyed:
                raise TenantKeyDestroyed(tenant_id)
            found = self._cache.get((tenant_id, key_id))
            if found is None or found[1] < time.monotonic():
                return None
            self._cache.move_to_end((tenant_id, key_id))
            return found[0]

    def _remember(self, tenant_id: str, key_id: str, key: bytes | None) -> AESGCM:
        if key is None:
            raise PayloadErased(tenant_id, key_id)
        aes = AESGCM(key)
        with self._lock:
            # Fetched while its tenant was being deleted: not kept, not used.
            if tenant_id in self._destroyed:
                raise TenantKeyDestroyed(tenant_id)
            self._cache[(tenant_id, key_id)] = (aes, time.monotonic() + self._ttl)
            self._cache.move_to_end((tenant_id, key_id))
            while len(self._cache) > self._max_keys:
                self._cache.popitem(last=False)
        return aes
