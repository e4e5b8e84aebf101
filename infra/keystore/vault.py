"""Wrapped keys in a NATS key-value bucket, never in the events stream.

Two kinds of entries, each a `WrappedKey`:

- `tenant.<tenant>`: the tenant's key, wrapped by the operator's key (`KeyWrapper`);
- `data.<tenant>.<root thread>`: a thread tree's data key, wrapped by the tenant's key.

A data key is destroyed by putting `destroyed` in its entry and erasing every earlier
revision (the server overwrites the stored messages): a later create of the same key is
refused, so a deleted thread's tree can never be written to again. Rotating the operator
key or a tenant's key rewraps the entries below it (`rotation.py`); the log is never
rewritten. Every write erases the revision it replaced (`revisions.py`): no replaced or
destroyed key stays in the store's files.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, DiscardPolicy, StorageType, StreamConfig
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

from agency.contracts.errors import StructuredError
from agency.contracts.sealed import PayloadErased
from agency.infra.keystore.operator import KeyRing, KeyWrapper, open_key, seal_key
from agency.infra.keystore.revisions import HISTORY, Revisions

log = structlog.get_logger(__name__)

KEYS_BUCKET = "agency_keys"
KEY_BYTES = 32
# What a destroyed key's entry holds from then on: no key is ever made there again.
DESTROYED = b"destroyed"
# Seconds a tenant key held in memory is used before the store is asked again whether
# the tenant was deleted (the bound, for a process that missed the destroyed entry).
TENANT_RECHECK = 30.0
# The header a key-value delete or purge carries (what a put of `DESTROYED` replaces).
_KV_OPERATION = "KV-Operation"


class WrappedKey(msgspec.Struct, frozen=True, kw_only=True):
    """`wrapped_by`: the id of the key that wraps it (the operator key's id, or `tenant`).

    A tenant entry's `version` names its key, and `previous` holds the keys it replaced
    while a rotation rewraps the data keys under the new one, with when and at whose
    request the rotation began (and the request's idempotency key). A data entry's
    `version` names the tenant key wrapping it (`""`: the tenant's first)."""

    wrapped_by: str
    data: bytes
    version: str = ""
    previous: tuple[WrappedKey, ...] = ()
    rotated_at: str = ""
    rotated_by: str = ""
    request_key: str = ""


class TenantKeyMissing(StructuredError):
    """A data key wrapped by a tenant key the store no longer holds."""

    entry: str
    version: str
    message = "{entry} is wrapped by tenant key version {version!r}, which is gone"


class TenantKeyDestroyed(PayloadErased):
    """The tenant was deleted: its key is destroyed, and nothing sealed for it opens."""

    def __init__(self, tenant_id: str) -> None:
        super().__init__(tenant_id, "")
        self.args = (f"tenant {tenant_id!r} was deleted: its key is destroyed",)


_decoder = msgspec.json.Decoder(WrappedKey)


def tenant_entry(tenant_id: str) -> str:
    return f"tenant.{tenant_id}"


def data_entry(tenant_id: str, key_id: str) -> str:
    return f"data.{tenant_id}.{key_id}"


def keys_stream(bucket: str = KEYS_BUCKET, replicas: int = 1) -> StreamConfig:
    """The key-value bucket's stream, as the client makes one but for `deny_delete` (a
    replaced or destroyed revision is deleted, which erases its bytes where it is stored)
    and for its history: two revisions per entry, a third refused rather than the oldest
    dropped unerased (`revisions.py`). Provisioned with the other streams (their
    replicas); made here if it is missing."""
    return StreamConfig(
        name=f"KV_{bucket}",
        description="Wrapped tenant and thread data keys (docs/data.md).",
        subjects=[f"$KV.{bucket}.>"],
        allow_rollup_hdrs=True,
        deny_delete=False,
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
        duplicate_window=120.0,
        max_consumers=-1,
        max_msgs=-1,
        max_msgs_per_subject=HISTORY,
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
        self._ring = wrapper if isinstance(wrapper, KeyRing) else KeyRing(wrapper)
        self._bucket = bucket
        self._replicas = replicas
        self._kv: KeyValue | None = None
        self._revisions: Revisions | None = None
        # (tenant, version) → the tenant key; a version's key never changes.
        self._tenant_keys: dict[tuple[str, str], bytes] = {}
        self._current: dict[str, str] = {}  # tenant → the version last read current
        self._confirmed: dict[str, float] = {}  # tenant → when its entry was last read live

    @property
    def ring(self) -> KeyRing:
        return self._ring

    async def open(self) -> KeyVault:
        try:
            self._kv = await self._js.key_value(self._bucket)
        except (BucketNotFoundError, NotFoundError):
            with contextlib.suppress(BadRequestError):
                await self._js.add_stream(keys_stream(self._bucket, self._replicas))
            self._kv = await self._js.key_value(self._bucket)
        self._revisions = Revisions(self._js, self._kv, self._bucket)
        return self

    @property
    def revisions(self) -> Revisions:
        assert self._revisions is not None, "KeyVault is not open"
        return self._revisions

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "KeyVault is not open"
        return self._kv

    async def tenant_key(self, tenant_id: str) -> bytes:
        """The tenant's current key, made on first use."""
        return (await self.current_tenant_key(tenant_id))[1]

    async def current_tenant_key(self, tenant_id: str) -> tuple[str, bytes]:
        """The tenant's current key and its version, as stored now; made on first use."""
        entry = tenant_entry(tenant_id)
        while True:
            stored, _ = await self.tenant_record(tenant_id)
            if stored is not None:
                self._current[tenant_id] = stored.version
                return stored.version, self._opened(tenant_id, stored)[stored.version]
            key = secrets.token_bytes(KEY_BYTES)
            made = WrappedKey(
                wrapped_by=self._ring.key_id, data=self._ring.wrap(key, entry.encode())
            )
            try:
                await self.revisions.store(entry, msgspec.json.encode(made), last=0)
            except KeyWrongLastSequenceError:
                continue  # made by another process meanwhile: read theirs
            self._tenant_keys[(tenant_id, "")] = key
            self._current[tenant_id] = ""
            return "", key

    async def tenant_record(self, tenant_id: str) -> tuple[WrappedKey | None, int]:
        """The tenant's stored entry and its revision (0 when it has none);
        `TenantKeyDestroyed` once the tenant was deleted."""
        try:
            found = await self.kv.get(tenant_entry(tenant_id))
        except KeyNotFoundError:
            return None, 0
        except KeyDeletedError:
            raise TenantKeyDestroyed(tenant_id) from None
        if found.value is None:
            return None, 0
        if found.value == DESTROYED:
            raise TenantKeyDestroyed(tenant_id)
        self._confirmed[tenant_id] = time.monotonic()
        return _decoder.decode(found.value), found.revision or 0

    def _opened(self, tenant_id: str, stored: WrappedKey) -> dict[str, bytes]:
        """Every tenant key the entry holds (its current and those a rotation still keeps),
        by version, remembered."""
        context = tenant_entry(tenant_id).encode()
        keys: dict[str, bytes] = {}
        for held in (stored, *stored.previous):
            key = self._tenant_keys.get((tenant_id, held.version))
            if key is None:
                key = self._ring.unwrap_by(held.wrapped_by, held.data, context)
                self._tenant_keys[(tenant_id, held.version)] = key
            keys[held.version] = key
        return keys

    async def tenant_key_version(self, tenant_id: str, version: str) -> bytes:
        """The tenant key of that version: remembered, or read from the store. One
        remembered longer than `TENANT_RECHECK` is used only once the store shows the
        tenant still there (`TenantKeyDestroyed` once it was deleted)."""
        key = self._tenant_keys.get((tenant_id, version))
        if key is not None:
            if time.monotonic() - self._confirmed.get(tenant_id, 0.0) > TENANT_RECHECK:
                await self.tenant_record(tenant_id)
            return key
        stored, _ = await self.tenant_record(tenant_id)
        if stored is None:
            if version:
                raise TenantKeyMissing(tenant_entry(tenant_id), version)
            return await self.tenant_key(tenant_id)
        key = self._opened(tenant_id, stored).get(version)
        if key is None:
            raise TenantKeyMissing(tenant_entry(tenant_id), version)
        return key

    def forget_tenant(self, tenant_id: str, keep: str) -> None:
        """Drop the tenant's keys but version `keep` from memory (a rotation finished)."""
        for held in [k for k in self._tenant_keys if k[0] == tenant_id and k[1] != keep]:
            del self._tenant_keys[held]

    async def data_key(
        self, tenant_id: str, key_id: str, *, create: bool, fresh: bool = False
    ) -> bytes | None:
        """The tree's data key; made when `create` and it never existed (with `fresh`, made
        without a look first: the tree's root is being created). None when it never
        existed (and not `create`); `PayloadErased` when it was destroyed."""
        if create and fresh:
            try:
                return await self.new_data_key(tenant_id, key_id)
            except KeyWrongLastSequenceError:
                pass  # it exists (or was destroyed): read it
        entry = data_entry(tenant_id, key_id)
        context = entry.encode()
        try:
            stored = await self._get(entry)
        except KeyDeletedError:
            raise PayloadErased(tenant_id, key_id) from None
        if stored is not None:
            tenant_key = await self.tenant_key_version(tenant_id, stored.version)
            return open_key(tenant_key, stored.data, context)
        if not create:
            return None
        try:
            return await self.new_data_key(tenant_id, key_id)
        except KeyWrongLastSequenceError:
            # Made by another process meanwhile, or destroyed: read what won.
            return await self.data_key(tenant_id, key_id, create=False)

    async def new_data_key(self, tenant_id: str, key_id: str) -> bytes:
        """A data key made and stored for the tree, with no look at the store first (for an
        id just minted, which no one else can have used); `KeyWrongLastSequenceError` when
        the entry exists (made meanwhile, or destroyed)."""
        return (await self.new_data_keys(tenant_id, [key_id]))[key_id]

    async def new_data_keys(self, tenant_id: str, key_ids: Sequence[str]) -> dict[str, bytes]:
        """`new_data_key` for several trees at once, their writes in flight together and
        one look at the tenant's entry after them all: the keys stored, by id (the error
        of the first that was not, when none was)."""
        # The tenant key this process last saw current (read from the store the first
        # time); a rotation begun since is caught by the read after the keys are stored.
        version = self._current.get(tenant_id)
        if version is None or (tenant_id, version) not in self._tenant_keys:
            version, tenant_key = await self.current_tenant_key(tenant_id)
        else:
            tenant_key = self._tenant_keys[(tenant_id, version)]
        keys = {key_id: secrets.token_bytes(KEY_BYTES) for key_id in key_ids}
        writes = []
        for key_id, key in keys.items():
            entry = data_entry(tenant_id, key_id)
            made = WrappedKey(
                wrapped_by="tenant", version=version, data=seal_key(tenant_key, key, entry.encode())
            )
            writes.append(self.revisions.store(entry, msgspec.json.encode(made), last=0))
        results = await asyncio.gather(*writes, return_exceptions=True)
        stored = {
            k: key for (k, key), r in zip(keys.items(), results, strict=True) if isinstance(r, int)
        }
        if not stored:
            failure = next(r for r in results if isinstance(r, BaseException))
            raise failure
        # A rotation that began before these keys were stored may have listed the tenant's
        # keys without them: they are then rewrapped here, under the rotation's key.
        now, now_key = await self.current_tenant_key(tenant_id)
        if now != version:
            for key_id in stored:
                await self.rewrap_data(tenant_id, data_entry(tenant_id, key_id), now, now_key)
        return stored

    async def erase_unused(self, tenant_id: str, key_id: str) -> int:
        """Erase every revision of a data key no event was ever sealed with (one made ahead
        and not taken): nothing of it is left, not even a destroyed entry. How many."""
        return await self.revisions.erase_before(data_entry(tenant_id, key_id), 0)

    async def rewrap_data(self, tenant_id: str, entry: str, version: str, key: bytes) -> bool:
        """The data key at `entry` wrapped under the tenant key `version`; False when it was
        already, or is destroyed. Another writer of the entry meanwhile is read again."""
        context = entry.encode()
        while True:
            try:
                found = await self.kv.get(entry)
            except (KeyNotFoundError, KeyDeletedError):
                return False
            if found.value is None or found.value == DESTROYED:
                return False
            stored = _decoder.decode(found.value)
            if stored.version == version:
                return False
            old_key = await self.tenant_key_version(tenant_id, stored.version)
            plain = open_key(old_key, stored.data, context)
            rewrapped = WrappedKey(
                wrapped_by="tenant", version=version, data=seal_key(key, plain, context)
            )
            try:
                await self.revisions.store(
                    entry, msgspec.json.encode(rewrapped), found.revision or 0
                )
            except KeyWrongLastSequenceError:
                continue
            return True

    async def destroy_tenant(self, tenant_id: str) -> bool:
        """Erase the tenant's key (the tenant is deleted): no data key wrapped by it opens
        again, none is made again, here or in any process reading the store (one holding
        it in memory drops it as it sees the entry destroyed: `follow_destroyed`). False
        when it was gone already."""
        self.drop_tenant(tenant_id)
        return await self._erase(tenant_entry(tenant_id))

    def drop_tenant(self, tenant_id: str) -> None:
        """Drop every key of the tenant held in memory (its key was destroyed)."""
        for held in [k for k in self._tenant_keys if k[0] == tenant_id]:
            del self._tenant_keys[held]
        self._current.pop(tenant_id, None)
        self._confirmed.pop(tenant_id, None)

    async def follow_destroyed(self, destroyed: Callable[[str], None]) -> Any:
        """Follow the tenant entries from now on: each tenant whose key is destroyed (by
        any process) has its keys dropped here, then `destroyed(tenant)` is called. An
        ordered consumer: it takes up again where it was after a reconnect. The
        subscription is returned (it ends with the connection)."""
        head = f"$KV.{self._bucket}.{tenant_entry('')}"

        async def seen(msg: Msg) -> None:
            operation = (msg.headers or {}).get(_KV_OPERATION)
            if msg.data != DESTROYED and operation not in ("DEL", "PURGE"):
                return  # made, or rewrapped by a rotation
            tenant_id = msg.subject.removeprefix(head)
            self.drop_tenant(tenant_id)
            destroyed(tenant_id)

        return await self._js.subscribe(
            f"{head}*",
            stream=self.revisions.stream,
            cb=seen,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )

    async def destroy(self, tenant_id: str, key_id: str) -> bool:
        """Erase the tree's data key: `destroyed` stored in its entry, every earlier
        revision's message overwritten. False when it was already gone (a repeat is
        harmless, and erases what a destroy stopped midway left)."""
        return await self._erase(data_entry(tenant_id, key_id))

    async def _erase(self, entry: str) -> bool:
        try:
            found = await self.kv.get(entry)
        except (KeyDeletedError, KeyNotFoundError):
            found = None
        if found is not None and found.value == DESTROYED and found.revision:
            destroyed = found.revision
        else:
            # `destroyed` first, then what it replaced: a key made meanwhile (with no
            # entry seen) is erased too, and none is made after it.
            destroyed = await self.revisions.put_over(entry, DESTROYED)
            if found is not None and found.revision:
                await self.revisions.erase(found.revision)  # the one read, without a look
        # Another process destroying the same key (two carriers of one deletion) may erase
        # some of these first, which changes nothing.
        await self.revisions.erase_before(entry, destroyed)
        return found is not None and found.value != DESTROYED

    async def update_tenant(self, tenant_id: str, record: WrappedKey, last: int) -> bool:
        """Store the tenant's entry if it is still at revision `last`; False when another
        writer came first."""
        try:
            await self.revisions.store(tenant_entry(tenant_id), msgspec.json.encode(record), last)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def entries(self, prefix: str) -> list[str]:
        """The names of the bucket's entries starting with `prefix` (which ends with a
        `.`), as the server counts its subjects: every one, however loaded the server (a
        KV watch of the keys may end before it has delivered them all)."""
        return sorted(await self.revisions.held(prefix))

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
