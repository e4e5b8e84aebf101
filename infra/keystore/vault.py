"""Wrapped keys in a NATS key-value bucket, never in the events stream.

Two kinds of entries, each a `WrappedKey`:

- `tenant.<tenant>`: the tenant's key, wrapped by the operator's key (`KeyWrapper`);
- `data.<tenant>.<root thread>`: a thread tree's data key, wrapped by the tenant's key.

A data key is destroyed by erasing its entry (the server overwrites the stored message)
and putting `destroyed` in its place: a later create of the same key is refused, so a
deleted thread's tree can never be written to again. Rotating the operator
key or a tenant's key rewraps the entries below it; the log is never rewritten.
"""

from __future__ import annotations

import contextlib
import secrets

import msgspec
import structlog
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from agency.contracts.sealed import PayloadErased
from agency.infra.keystore.operator import KeyWrapper, open_key, seal_key

log = structlog.get_logger(__name__)

KEYS_BUCKET = "agency_keys"
KEY_BYTES = 32
# What a destroyed key's entry holds from then on: no key is ever made there again.
DESTROYED = b"destroyed"
# JetStream's "sequence not found": the message was deleted already.
SEQUENCE_NOT_FOUND = 10043


class WrappedKey(msgspec.Struct, frozen=True, kw_only=True):
    """`wrapped_by`: the id of the key that wraps it (the operator key's id, or `tenant`)."""

    wrapped_by: str
    data: bytes


_decoder = msgspec.json.Decoder(WrappedKey)


def tenant_entry(tenant_id: str) -> str:
    return f"tenant.{tenant_id}"


def data_entry(tenant_id: str, key_id: str) -> str:
    return f"data.{tenant_id}.{key_id}"


def keys_stream(bucket: str = KEYS_BUCKET, replicas: int = 1) -> StreamConfig:
    """The key-value bucket's stream, as the client makes one but for `deny_delete`: a
    destroyed key's message is deleted, which erases its bytes where it is stored.
    Provisioned with the other streams (their replicas); made here if it is missing."""
    return StreamConfig(
        name=f"KV_{bucket}",
        description="Wrapped tenant and thread data keys (docs/data.md).",
        subjects=[f"$KV.{bucket}.>"],
        allow_rollup_hdrs=True,
        deny_delete=False,
        discard=DiscardPolicy.NEW,
        duplicate_window=120.0,
        max_consumers=-1,
        max_msgs=-1,
        max_msgs_per_subject=1,
        num_replicas=replicas,
        storage=StorageType.FILE,
    )


class KeyVault:
    """The key store over one connection. `open()` binds (or creates) the bucket."""

    def __init__(
        self,
        js: JetStreamContext,
        wrapper: KeyWrapper,
        *,
        bucket: str = KEYS_BUCKET,
        replicas: int = 1,
    ) -> None:
        self._js = js
        self._wrapper = wrapper
        self._bucket = bucket
        self._replicas = replicas
        self._kv: KeyValue | None = None
        self._tenant_keys: dict[str, bytes] = {}

    @property
    def wrapper(self) -> KeyWrapper:
        return self._wrapper

    async def open(self) -> KeyVault:
        try:
            self._kv = await self._js.key_value(self._bucket)
        except (BucketNotFoundError, NotFoundError):
            with contextlib.suppress(BadRequestError):
                await self._js.add_stream(keys_stream(self._bucket, self._replicas))
            self._kv = await self._js.key_value(self._bucket)
        return self

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "KeyVault is not open"
        return self._kv

    async def tenant_key(self, tenant_id: str) -> bytes:
        """The tenant's key, made on first use."""
        cached = self._tenant_keys.get(tenant_id)
        if cached is not None:
            return cached
        entry = tenant_entry(tenant_id)
        context = entry.encode()
        stored = await self._get(entry)
        if stored is None:
            key = secrets.token_bytes(KEY_BYTES)
            wrapped = self._wrapper.wrap(key, context)
            made = WrappedKey(wrapped_by=self._wrapper.key_id, data=wrapped)
            try:
                await self.kv.update(entry, msgspec.json.encode(made), last=0)
            except KeyWrongLastSequenceError:
                stored = await self._get(entry)
        if stored is not None:
            key = self._wrapper.unwrap(stored.data, context)
        self._tenant_keys[tenant_id] = key
        return key

    async def data_key(self, tenant_id: str, key_id: str, *, create: bool) -> bytes | None:
        """The tree's data key; made when `create` and it never existed. None when it never
        existed (and not `create`); `PayloadErased` when it was destroyed."""
        entry = data_entry(tenant_id, key_id)
        context = entry.encode()
        try:
            stored = await self._get(entry)
        except KeyDeletedError:
            raise PayloadErased(tenant_id, key_id) from None
        tenant_key = await self.tenant_key(tenant_id)
        if stored is None:
            if not create:
                return None
            key = secrets.token_bytes(KEY_BYTES)
            made = WrappedKey(wrapped_by="tenant", data=seal_key(tenant_key, key, context))
            try:
                await self.kv.update(entry, msgspec.json.encode(made), last=0)
                return key
            except KeyWrongLastSequenceError:
                # Made by another process meanwhile, or destroyed: read what won.
                return await self.data_key(tenant_id, key_id, create=False)
        return open_key(tenant_key, stored.data, context)

    async def destroy(self, tenant_id: str, key_id: str) -> bool:
        """Erase the tree's data key: its stored message overwritten, its history purged.
        False when it was already gone (a repeat is harmless)."""
        entry = data_entry(tenant_id, key_id)
        try:
            found = await self.kv.get(entry)
        except (KeyDeletedError, KeyNotFoundError):
            found = None
        if found is not None and found.value == DESTROYED:
            return False
        if found is not None and found.revision is not None:
            # The stream's delete erases the message's bytes where it is stored.
            try:
                await self._js.delete_msg(f"KV_{self._bucket}", found.revision)
            except BadRequestError as e:
                if e.err_code != SEQUENCE_NOT_FOUND:
                    raise
                # Another process destroying the same key (two carriers of one deletion)
                # erased it first; `destroyed` is put again, which changes nothing.
        await self.kv.put(entry, DESTROYED)
        return found is not None

    async def rotate_operator(self, old: KeyWrapper) -> int:
        """Rewrap every tenant key under this vault's wrapper, from `old`; returns how many."""
        count = 0
        for entry in await self._keys("tenant."):
            stored = await self._get(entry)
            if stored is None or stored.wrapped_by == self._wrapper.key_id:
                continue
            key = old.unwrap(stored.data, entry.encode())
            rewrapped = WrappedKey(
                wrapped_by=self._wrapper.key_id, data=self._wrapper.wrap(key, entry.encode())
            )
            await self.kv.put(entry, msgspec.json.encode(rewrapped))
            count += 1
        self._tenant_keys.clear()
        return count

    async def rotate_tenant(self, tenant_id: str) -> int:
        """A new key for the tenant; its data keys rewrapped under it. Returns how many."""
        old_key = await self.tenant_key(tenant_id)
        new_key = secrets.token_bytes(KEY_BYTES)
        rewrapped: dict[str, bytes] = {}
        for entry in await self._keys(f"data.{tenant_id}."):
            try:
                stored = await self._get(entry)
            except KeyDeletedError:
                continue  # destroyed: nothing to rewrap
            if stored is None:
                continue
            key = open_key(old_key, stored.data, entry.encode())
            rewrapped[entry] = msgspec.json.encode(
                WrappedKey(wrapped_by="tenant", data=seal_key(new_key, key, entry.encode()))
            )
        entry = tenant_entry(tenant_id)
        # The new tenant key first: a data key rewrapped under it is readable at once.
        made = WrappedKey(
            wrapped_by=self._wrapper.key_id, data=self._wrapper.wrap(new_key, entry.encode())
        )
        await self.kv.put(entry, msgspec.json.encode(made))
        self._tenant_keys[tenant_id] = new_key
        for data_name, value in rewrapped.items():
            await self.kv.put(data_name, value)
        return len(rewrapped)

    async def _get(self, entry: str) -> WrappedKey | None:
        """The entry, None when it never existed; `KeyDeletedError` when it was destroyed."""
        try:
            found = await self.kv.get(entry)
        except KeyNotFoundError:
            return None
        if found.value is None:
            return None
        if found.value == DESTROYED:
            raise KeyDeletedError(found, "destroyed")
        return _decoder.decode(found.value)

    async def _keys(self, prefix: str) -> list[str]:
        try:
            return [k for k in await self.kv.keys() if k.startswith(prefix)]
        except NoKeysError:
            return []
