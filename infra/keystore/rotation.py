"""Rotating the keys that wrap others, without rewriting the log (docs/data.md).

- A tenant key: a new key is stored beside the old one (the tenant entry's `previous`),
  each data key of the tenant is rewrapped under it, and only then is the old one dropped.
  A rotation stopped midway loses nothing: every data key still opens with the key it
  names, and the next rotation of that tenant finishes this one before starting anew,
  erasing any replaced revision it left stored (`revisions.py`).
- The operator key: every tenant entry (its current key and any kept by a rotation under
  way) is rewrapped under the vault's current operator key, from the one that wrapped it,
  which the vault's `KeyRing` must hold until this has finished. A repeat finds nothing
  left to do but the replaced revisions a stopped one left stored, which it erases.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import msgspec
import structlog

from agency.infra.keystore.operator import KeyRing, KeyWrapper
from agency.infra.keystore.vault import (
    KEY_BYTES,
    KeyVault,
    TenantKeyDestroyed,
    WrappedKey,
    tenant_entry,
)

log = structlog.get_logger(__name__)


class TenantRotation(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant key's rotation: the new key's version, how many data keys were rewrapped
    under it, when and at whose request it began, and whether it finished an earlier one."""

    tenant_id: str
    version: str
    rewrapped: int
    rotated_at: str
    rotated_by: str
    resumed: bool


class OperatorRotation(msgspec.Struct, frozen=True, kw_only=True):
    """The operator key's rotation: the key now wrapping every tenant key, how many tenant
    entries were rewrapped and how many already were."""

    key_id: str
    rewrapped: int
    unchanged: int


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _begin(
    vault: KeyVault, tenant_id: str, requested_by: str, request_key: str = ""
) -> tuple[WrappedKey, bool]:
    """The tenant entry holding the rotation's new key beside the old: stored now, or the
    one an unfinished rotation stored, or the last one when `request_key` asked for it
    (then `True`)."""
    await vault.tenant_key(tenant_id)  # a tenant with no key yet gets its first
    entry = tenant_entry(tenant_id).encode()
    while True:
        stored, revision = await vault.tenant_record(tenant_id)
        assert stored is not None
        if stored.previous or (request_key and stored.request_key == request_key):
            return stored, True
        key = secrets.token_bytes(KEY_BYTES)
        begun = WrappedKey(
            wrapped_by=vault.ring.key_id,
            data=vault.ring.wrap(key, entry),
            version=secrets.token_hex(8),
            previous=(
                msgspec.structs.replace(stored, rotated_at="", rotated_by="", request_key=""),
            ),
            rotated_at=_now(),
            rotated_by=requested_by,
            request_key=request_key,
        )
        if await vault.update_tenant(tenant_id, begun, revision):
            return begun, False


async def _finish(vault: KeyVault, tenant_id: str, version: str) -> None:
    """Drop the keys the rotation to `version` kept, unless another writer moved on."""
    while True:
        stored, revision = await vault.tenant_record(tenant_id)
        if stored is None or stored.version != version or not stored.previous:
            return
        if await vault.update_tenant(
            tenant_id, msgspec.structs.replace(stored, previous=()), revision
        ):
            vault.forget_tenant(tenant_id, keep=version)
            return


async def rotate_tenant(
    vault: KeyVault, tenant_id: str, requested_by: str, request_key: str = ""
) -> TenantRotation:
    """A new key for the tenant, its data keys rewrapped under it, the old key dropped. A
    repeat of the request (the same `request_key`) answers the rotation it made."""
    begun, resumed = await _begin(vault, tenant_id, requested_by, request_key)
    version = begun.version
    key = await vault.tenant_key_version(tenant_id, version)
    rewrapped = 0
    for entry in await vault.entries(f"data.{tenant_id}."):
        if await vault.rewrap_data(tenant_id, entry, version, key):
            rewrapped += 1
    await _finish(vault, tenant_id, version)
    # Each write erased the revision it replaced; what a rotation stopped between the two
    # left is erased here.
    await vault.revisions.sweep(f"data.{tenant_id}.")
    rotation = TenantRotation(
        tenant_id=tenant_id,
        version=version,
        rewrapped=rewrapped,
        rotated_at=begun.rotated_at,
        rotated_by=begun.rotated_by,
        resumed=resumed,
    )
    log.info("tenant key rotated", **msgspec.structs.asdict(rotation))
    return rotation


def _rewrapped(ring: KeyRing, entry: bytes, held: WrappedKey) -> WrappedKey:
    key = ring.unwrap_by(held.wrapped_by, held.data, entry)
    return msgspec.structs.replace(held, wrapped_by=ring.key_id, data=ring.wrap(key, entry))


async def rotate_operator(
    vault: KeyVault, requested_by: str, old: KeyWrapper | None = None
) -> OperatorRotation:
    """Every tenant key rewrapped under the vault's current operator key, from the previous
    one its ring holds (or `old`)."""
    ring = vault.ring
    if old is not None:
        ring = KeyRing(ring.current, (*ring.previous, old))
    rewrapped = unchanged = 0
    for name in await vault.entries("tenant."):
        tenant_id = name.removeprefix("tenant.")
        entry = name.encode()
        while True:
            try:
                stored, revision = await vault.tenant_record(tenant_id)
            except TenantKeyDestroyed:
                break  # a deleted tenant's: nothing to rewrap
            if stored is None or all(
                held.wrapped_by == ring.key_id for held in (stored, *stored.previous)
            ):
                unchanged += stored is not None
                break
            record = msgspec.structs.replace(
                _rewrapped(ring, entry, stored),
                previous=tuple(_rewrapped(ring, entry, held) for held in stored.previous),
            )
            if await vault.update_tenant(tenant_id, record, revision):
                rewrapped += 1
                break
    await vault.revisions.sweep("tenant.")
    log.info(
        "operator key rotated",
        key_id=ring.key_id,
        rewrapped=rewrapped,
        unchanged=unchanged,
        rotated_at=_now(),
        rotated_by=requested_by,
    )
    return OperatorRotation(key_id=ring.key_id, rewrapped=rewrapped, unchanged=unchanged)
