"""Rotating the operator key and tenant keys in the key store: every data key still opens,
the old key opens nothing, a rotation stopped midway loses nothing and is finished by the
next, and a data key made while a rotation runs is not left under the old key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from cryptography.exceptions import InvalidTag

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.keystore.operator import KeyRing, KeyUnwrapError, LocalKeyWrapper, open_key
from agency.infra.keystore.rotation import _begin, rotate_operator, rotate_tenant
from agency.infra.keystore.vault import KeyVault, TenantKeyDestroyed, WrappedKey, data_entry


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
