"""Rotating the operator key and tenant keys in the key store: every data key still opens,
the old key opens nothing, a rotation stopped midway loses nothing and is finished by the
next, and a data key made while a rotation runs is not left under the old key."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from cryptography.exceptions import InvalidTag

from agency.contracts.ids import new_id
from agency.contracts.sealed import PayloadErased
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.natsclient import connect as nats_connect
from agency.infra.jetstream.streams import provision
from agency.infra.keystore.operator import KeyRing, KeyUnwrapError, LocalKeyWrapper, open_key
from agency.infra.keystore.rotation import _begin, rotate_operator, rotate_tenant
from agency.infra.keystore.vault import (
    KeyVault,
    TenantKeyDestroyed,
    WrappedKey,
    data_entry,
    keys_stream,
    tenant_entry,
)
from agency.infra.launch import NatsServer


@pytest.fixture
async def bucket(bus: Bus) -> AsyncIterator[str]:
    name = "test_keys_" + new_id().lower()
    yield name
    await bus.js.delete_key_value(name)


def vault_of(bus: Bus, bucket: str, key: LocalKeyWrapper, *previous: LocalKeyWrapper) -> KeyVault:
    return KeyVault(bus.js, KeyRing(key, previous), bucket=bucket)


async def stored(vault: KeyVault, entry: str) -> WrappedKey:
    found = await vault.kv.get(entry)
    assert found.value is not None
    return msgspec.json.decode(found.value, type=WrappedKey)


async def stored_bytes(vault: KeyVault, entry: str) -> bytes:
    found = await vault.kv.get(entry)
    assert found.value is not None
    return found.value


async def test_a_tenant_rotation_rewraps_its_data_keys_and_drops_the_old_key(
    bus: Bus, bucket: str
) -> None:
    operator = LocalKeyWrapper("op-" + new_id())
    vault = await vault_of(bus, bucket, operator).open()
    keys = {t: await vault.data_key("ta", t, create=True) for t in ("th1", "th2")}
    other = await vault.data_key("tb", "th1", create=True)
    old_tenant_key = await vault.tenant_key("ta")
    other_before = await stored(vault, data_entry("tb", "th1"))

    rotation = await rotate_tenant(vault, "ta", "admin")

    fresh = await vault_of(bus, bucket, operator).open()  # as a restarted process
    assert rotation.rewrapped == 2 and not rotation.resumed and rotation.rotated_by == "admin"
    assert {t: await fresh.data_key("ta", t, create=False) for t in keys} == keys
    assert await fresh.tenant_key("ta") != old_tenant_key
    record, _ = await fresh.tenant_record("ta")
    assert record is not None and record.previous == () and record.version == rotation.version
    for thread in keys:
        entry = data_entry("ta", thread)
        with pytest.raises(InvalidTag):
            open_key(old_tenant_key, (await stored(fresh, entry)).data, entry.encode())
    assert await stored(fresh, data_entry("tb", "th1")) == other_before
    assert await fresh.data_key("tb", "th1", create=False) == other


async def test_a_tenant_rotation_stopped_midway_loses_nothing_and_is_finished_by_the_next(
    bus: Bus, bucket: str
) -> None:
    operator = LocalKeyWrapper("op-" + new_id())
    vault = await vault_of(bus, bucket, operator).open()
    keys = {t: await vault.data_key("ta", t, create=True) for t in ("th1", "th2")}
    begun, _ = await _begin(vault, "ta", "admin")  # stopped after its new key, one rewrapped
    new_key = await vault.tenant_key_version("ta", begun.version)
    assert await vault.rewrap_data("ta", data_entry("ta", "th1"), begun.version, new_key)

    midway = await vault_of(bus, bucket, operator).open()
    assert {t: await midway.data_key("ta", t, create=False) for t in keys} == keys
    finished = await rotate_tenant(midway, "ta", "operator")

    after = await vault_of(bus, bucket, operator).open()
    assert finished.resumed and finished.version == begun.version and finished.rewrapped == 1
    assert finished.rotated_by == "admin"  # the rotation finished is the one begun
    assert {t: await after.data_key("ta", t, create=False) for t in keys} == keys
    record, _ = await after.tenant_record("ta")
    assert record is not None and record.previous == ()


async def test_a_repeated_request_answers_the_rotation_it_made_and_makes_none_more(
    bus: Bus, bucket: str
) -> None:
    vault = await vault_of(bus, bucket, LocalKeyWrapper("op-" + new_id())).open()
    await vault.data_key("ta", "th1", create=True)

    made = await rotate_tenant(vault, "ta", "admin", "request-1")
    repeat = await rotate_tenant(vault, "ta", "admin", "request-1")
    other = await rotate_tenant(vault, "ta", "admin", "request-2")

    assert (made.rewrapped, made.resumed) == (1, False)
    assert (repeat.version, repeat.rewrapped, repeat.resumed) == (made.version, 0, True)
    assert other.version != made.version and not other.resumed


async def test_a_data_key_made_with_the_old_tenant_key_during_a_rotation_is_rewrapped(
    bus: Bus, bucket: str
) -> None:
    operator = LocalKeyWrapper("op-" + new_id())
    rotating = await vault_of(bus, bucket, operator).open()
    writer = await vault_of(bus, bucket, operator).open()
    await writer.data_key("ta", "th1", create=True)  # the writer knows the tenant key now
    begun, _ = await _begin(rotating, "ta", "admin")  # a rotation lists no th2 yet

    key = await writer.data_key("ta", "th2", create=True)  # made under the old key first

    assert (await stored(writer, data_entry("ta", "th2"))).version == begun.version
    await rotate_tenant(rotating, "ta", "admin")
    fresh = await vault_of(bus, bucket, operator).open()
    assert await fresh.data_key("ta", "th2", create=False) == key


async def test_an_operator_rotation_rewraps_every_tenant_key_and_a_repeat_does_nothing(
    bus: Bus, bucket: str
) -> None:
    old, new = LocalKeyWrapper("old-" + new_id()), LocalKeyWrapper("new-" + new_id())
    before = await vault_of(bus, bucket, old).open()
    keys = {t: await before.data_key(t, "th1", create=True) for t in ("ta", "tb")}

    during = await vault_of(bus, bucket, new, old).open()  # every process holds both
    rotation = await rotate_operator(during, "operator")
    again = await rotate_operator(during, "operator")

    after = await vault_of(bus, bucket, new).open()  # the old key forgotten
    assert (rotation.rewrapped, rotation.unchanged) == (2, 0)
    assert (again.rewrapped, again.unchanged) == (0, 2)
    assert {t: await after.data_key(t, "th1", create=False) for t in keys} == keys
    with pytest.raises(KeyUnwrapError, match="operator key"):
        await (await vault_of(bus, bucket, old).open()).tenant_key("ta")
    entry = await after.kv.get(data_entry("ta", "th1"))
    key = keys["ta"]
    assert entry.value is not None and key is not None and key not in entry.value


async def test_an_operator_rotation_stopped_midway_reads_on_with_both_keys_and_finishes(
    bus: Bus, bucket: str
) -> None:
    old, new = LocalKeyWrapper("old-" + new_id()), LocalKeyWrapper("new-" + new_id())
    before = await vault_of(bus, bucket, old).open()
    keys = {t: await before.data_key(t, "th1", create=True) for t in ("ta", "tb")}
    during = await vault_of(bus, bucket, new, old).open()
    record, revision = await during.tenant_record("ta")  # only ta rewrapped, then a stop
    assert record is not None
    key = old.unwrap(record.data, b"tenant.ta")
    await during.update_tenant(
        "ta",
        msgspec.structs.replace(record, wrapped_by=new.key_id, data=new.wrap(key, b"tenant.ta")),
        revision,
    )

    midway = await vault_of(bus, bucket, new, old).open()
    assert {t: await midway.data_key(t, "th1", create=False) for t in keys} == keys
    finished = await rotate_operator(midway, "operator")

    assert (finished.rewrapped, finished.unchanged) == (1, 1)
    after = await vault_of(bus, bucket, new).open()
    assert {t: await after.data_key(t, "th1", create=False) for t in keys} == keys


async def test_a_destroyed_tenant_key_opens_no_data_key_and_rotations_pass_it_by(
    bus: Bus, bucket: str
) -> None:
    """A deleted tenant's key is gone: its data keys open nowhere (a process that never
    held it included), none is made, and an operator rotation passes the entry by."""
    old, new = LocalKeyWrapper("old-" + new_id()), LocalKeyWrapper("new-" + new_id())
    vault = await vault_of(bus, bucket, old).open()
    await vault.data_key("ta", "th1", create=True)
    kept = await vault.data_key("tb", "th1", create=True)

    assert await vault.destroy_tenant("ta") is True
    assert await vault.destroy_tenant("ta") is False  # a repeat is harmless

    for process in (vault, await vault_of(bus, bucket, old).open()):
        with pytest.raises(TenantKeyDestroyed):
            await process.data_key("ta", "th1", create=False)
        with pytest.raises(TenantKeyDestroyed):
            await process.data_key("ta", "th2", create=True)
    rotation = await rotate_operator(await vault_of(bus, bucket, new, old).open(), "operator")
    assert (rotation.rewrapped, rotation.unchanged) == (1, 0)
    assert (
        await (await vault_of(bus, bucket, new).open()).data_key("tb", "th1", create=False) == kept
    )
    with pytest.raises(TenantKeyDestroyed):
        await rotate_tenant(vault, "ta", "admin")


def store_files(directory: Path) -> bytes:
    """Every file of a NATS store directory, as it is on disk (no compaction waited for)."""
    return b"".join(p.read_bytes() for p in directory.rglob("*") if p.is_file())


async def test_a_rotation_then_a_deletion_leave_no_replaced_key_in_the_nats_store_files(
    tmp_path: Path,
) -> None:
    """docs/data.md, "What a rotation and a deletion leave on disk": every revision a tenant
    rotation replaces is erased where it is stored, and the deletion erases the tenant entry
    with its every revision; only the data entry wrapped by the destroyed key is left."""
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats_connect([server.url])
        try:
            vault = await KeyVault(nc.jetstream(), LocalKeyWrapper("op")).open()
            data_key = await vault.data_key("t1", "root1", create=True)
            assert data_key is not None
            first_tenant_key = await vault.tenant_key("t1")
            data_before = await stored_bytes(vault, data_entry("t1", "root1"))
            tenant_before = await stored_bytes(vault, tenant_entry("t1"))
            begun, _ = await _begin(vault, "t1", "admin")  # both keys held, then stopped
            tenant_midway = await stored_bytes(vault, tenant_entry("t1"))
            rotated = await rotate_tenant(vault, "t1", "admin")
            assert rotated.resumed and rotated.rewrapped == 1
            tenant_now = await stored_bytes(vault, tenant_entry("t1"))
            data_now = await stored_bytes(vault, data_entry("t1", "root1"))
            assert await vault.revisions.held("") == {
                data_entry("t1", "root1"): 1,
                tenant_entry("t1"): 1,
            }
            now = msgspec.json.decode(tenant_now, type=WrappedKey)
            before = msgspec.json.decode(data_before, type=WrappedKey)
            assert now.previous == () and before.version != now.version == begun.version
            assert await vault.destroy_tenant("t1")
            await nc.flush()
        finally:
            await nc.close()
    files = store_files(tmp_path / "nats")
    assert data_now in files  # the data entry left, wrapped by the destroyed tenant key
    wrapped = [data_before, tenant_before, tenant_midway, tenant_now]
    plain = [data_key, first_tenant_key]
    found = [i for i, leftover in enumerate([*wrapped, *plain]) if leftover in files]
    assert found == []


async def test_a_write_stopped_before_its_erase_is_erased_by_the_next_rotation(
    tmp_path: Path,
) -> None:
    """A replaced revision left stored beside the current one (a process stopped between
    its write and its erase) refuses no write, and the next rotation erases it."""
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats_connect([server.url])
        try:
            vault = await KeyVault(nc.jetstream(), LocalKeyWrapper("op")).open()
            keys = {t: await vault.data_key("t1", t, create=True) for t in ("th1", "th2")}
            left = {t: await stored_bytes(vault, data_entry("t1", t)) for t in keys}
            for thread, value in left.items():  # written as the rewrap does, not erased
                entry = data_entry("t1", thread)
                await vault.kv.update(entry, value, last=(await vault.kv.get(entry)).revision)
            assert set((await vault.revisions.held("data.")).values()) == {2}

            rotated = await rotate_tenant(vault, "t1", "admin")

            assert rotated.rewrapped == 2
            assert set((await vault.revisions.held("")).values()) == {1}
            fresh = await KeyVault(nc.jetstream(), LocalKeyWrapper("op")).open()
            assert {t: await fresh.data_key("t1", t, create=False) for t in keys} == keys
            await nc.flush()
        finally:
            await nc.close()
    files = store_files(tmp_path / "nats")
    assert [t for t, value in left.items() if value in files] == []


async def test_concurrent_rotations_and_new_data_keys_lose_no_key_and_leave_one_revision(
    bus: Bus, bucket: str
) -> None:
    """Rotations and key makers at once: every data key still opens, and every entry
    holds its current revision alone."""
    operator = LocalKeyWrapper("op-" + new_id())
    vaults = [await vault_of(bus, bucket, operator).open() for _ in range(3)]
    first = {t: await vaults[0].data_key("ta", t, create=True) for t in ("th1", "th2")}

    made = await asyncio.gather(
        rotate_tenant(vaults[0], "ta", "admin"),
        *(vaults[1].data_key("ta", f"new{i}", create=True) for i in range(4)),
        rotate_tenant(vaults[2], "ta", "admin"),
        *(vaults[2].data_key("ta", f"new{i}", create=True) for i in range(4)),
    )
    keys = {**first, **{f"new{i}": made[1 + i] for i in range(4)}}
    assert made[6:] == list(keys.values())[2:]  # both makers of a key got the one stored
    await rotate_tenant(vaults[1], "ta", "admin")  # finishes any left midway

    fresh = await vault_of(bus, bucket, operator).open()
    assert {t: await fresh.data_key("ta", t, create=False) for t in keys} == keys
    assert set((await fresh.revisions.held("")).values()) == {1}


async def test_provisioning_brings_a_bucket_of_one_revision_to_two_and_its_writes_erase(
    tmp_path: Path,
) -> None:
    """A store provisioned when the bucket kept one revision per key is brought to two at
    the next provisioning, the third refused; a rotation then erases what it replaced."""
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats_connect([server.url])
        try:
            js = nc.jetstream()
            earlier = dataclasses.replace(
                keys_stream(), max_msgs_per_subject=1, discard_new_per_subject=False
            )
            await js.add_stream(earlier)
            vault = await KeyVault(js, LocalKeyWrapper("op")).open()
            await vault.data_key("t1", "root1", create=True)
            data_before = await stored_bytes(vault, data_entry("t1", "root1"))

            await provision(js)

            config = (await js.stream_info(str(earlier.name))).config
            assert (config.max_msgs_per_subject, config.discard_new_per_subject) == (2, True)
            await rotate_tenant(vault, "t1", "admin")
            assert set((await vault.revisions.held("")).values()) == {1}
            await nc.flush()
        finally:
            await nc.close()
    assert data_before not in store_files(tmp_path / "nats")


async def test_a_destroy_erases_every_revision_a_stopped_write_left(tmp_path: Path) -> None:
    """A data key whose entry holds a replaced revision beside the current one is destroyed
    with both: neither is left in the store's files, and no key is made there again."""
    async with NatsServer(tmp_path / "nats") as server:
        nc = await nats_connect([server.url])
        try:
            vault = await KeyVault(nc.jetstream(), LocalKeyWrapper("op")).open()
            entry = data_entry("t1", "root1")
            await vault.data_key("t1", "root1", create=True)
            first = await stored_bytes(vault, entry)
            later = msgspec.json.encode(
                msgspec.structs.replace(msgspec.json.decode(first, type=WrappedKey), version="x")
            )
            await vault.kv.update(entry, later, last=(await vault.kv.get(entry)).revision)

            assert await vault.destroy("t1", "root1")
            assert not await vault.destroy("t1", "root1")  # a repeat

            assert await vault.revisions.held("data.") == {entry: 1}
            with pytest.raises(PayloadErased):
                await vault.data_key("t1", "root1", create=True)
            await nc.flush()
        finally:
            await nc.close()
    files = store_files(tmp_path / "nats")
    assert first not in files and later not in files
