"""Thread data keys in the key store: events sealed on the log, keys rotated and destroyed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agency.contracts.events import MessageAppended, ThreadDeleted
from agency.contracts.events.base import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.opened import OPENED
from agency.contracts.sealed import PayloadErased
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.decoding import decode_recorded
from agency.infra.jetstream.records import EventContext, Position, UndecodableEvent
from agency.infra.keystore import current_cipher, vault
from agency.infra.keystore.operator import operator_keys
from agency.infra.keystore.rotation import rotate_tenant
from agency.infra.keystore.vault import KeyVault, TenantKeyDestroyed
from tests.helpers import assert_eventually


def said(text: str) -> MessageAppended:
    return MessageAppended(message=ChatMessage(role="user", content=text))


async def stored_bytes(bus: Bus, stream_seq: int) -> bytes:
    msg = await bus.js.get_msg(EVENTS_STREAM, seq=stream_seq)
    return msg.data or b""


async def test_a_threads_content_is_sealed_on_the_log_and_read_in_clear(
    bus: Bus, tenant: str
) -> None:
    thread, marker = new_id(), "marker-" + new_id()
    done = await bus.store.append(tenant, "thread", thread, [said(marker)], expected=Position())

    raw = await stored_bytes(bus, done.position.stream_seq)
    events = await bus.store.read(tenant, "thread", thread)

    assert marker.encode() not in raw and b'"sealed":{' in raw
    assert events[0].payload == said(marker)


async def test_a_subagent_thread_is_sealed_with_its_roots_key(bus: Bus, tenant: str) -> None:
    root, child, marker = new_id(), new_id(), "marker-" + new_id()
    context = EventContext(correlation_id=root)
    done = await bus.store.append(
        tenant, "thread", child, [said(marker)], expected=Position(), context=context
    )
    cipher = current_cipher()
    assert cipher is not None

    assert await cipher.destroy(tenant, root)

    raw = await stored_bytes(bus, done.position.stream_seq)
    subject = f"tenant.{tenant}.evt.thread.{child}"
    recorded = decode_recorded(raw, done.position.stream_seq, subject)
    assert isinstance(recorded, UndecodableEvent) and "erased" in recorded.reason


async def test_a_destroyed_key_erases_the_thread_and_is_never_made_again(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    await bus.store.append(tenant, "thread", thread, [said("x")], expected=Position())
    cipher = current_cipher()
    assert cipher is not None
    assert len(await bus.store.read(tenant, "thread", thread)) == 1  # opened, and held

    assert await cipher.destroy(tenant, thread)
    assert not await cipher.destroy(tenant, thread)  # a repeat is harmless

    assert await bus.store.read(tenant, "thread", thread) == []
    with pytest.raises(PayloadErased):
        await cipher.prepare(tenant, thread)
    with pytest.raises(PayloadErased):
        await cipher.vault_call(lambda vault: vault.data_key(tenant, thread, create=False))
    # A tenant key rotated after a deletion passes the destroyed key by.
    rotation = await cipher.vault_call(lambda vault: rotate_tenant(vault, tenant, "admin"))
    assert rotation.rewrapped == 0


async def test_rotating_a_tenant_key_rewraps_data_keys_without_touching_the_log(
    bus: Bus, tenant: str
) -> None:
    thread = new_id()
    done = await bus.store.append(tenant, "thread", thread, [said("kept")], expected=Position())
    raw = await stored_bytes(bus, done.position.stream_seq)
    cipher = current_cipher()
    assert cipher is not None

    rotation = await cipher.vault_call(lambda vault: rotate_tenant(vault, tenant, "admin"))
    cipher.forget(tenant, thread)

    assert rotation.rewrapped == 1
    assert await stored_bytes(bus, done.position.stream_seq) == raw
    assert (await bus.store.read(tenant, "thread", thread))[0].payload == said("kept")


async def test_a_key_destroyed_elsewhere_is_dropped_here_once_its_tombstone_is_read(
    bus: Bus, tenant: str
) -> None:
    """Another process's deletion destroys the key in the store; this process, which holds
    it in memory, stops opening the tree as soon as it reads the tree's `thread.deleted`."""
    thread = new_id()
    done = await bus.store.append(tenant, "thread", thread, [said("kept")], expected=Position())
    cipher = current_cipher()
    assert cipher is not None
    assert await cipher.vault_call(lambda vault: vault.destroy(tenant, thread))
    OPENED.clear()
    (held,) = await bus.store.read(tenant, "thread", thread)
    assert held.payload == said("kept")  # the key held here still opens it
    tombstone = ThreadDeleted(requested_by="elsewhere", root_thread_id=thread, tree=(thread,))
    await bus.store.append(tenant, "thread", thread, [tombstone], expected=done.position)
    OPENED.clear()
    events = await bus.store.read(tenant, "thread", thread)  # reads the tombstone first
    assert isinstance(events[-1].payload, ThreadDeleted)
    raw = await stored_bytes(bus, done.position.stream_seq)
    recorded = decode_recorded(
        raw, done.position.stream_seq, f"tenant.{tenant}.evt.thread.{thread}"
    )
    assert isinstance(recorded, UndecodableEvent) and "erased" in recorded.reason


REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def key_holder(nats_url: str, stream_seq: int) -> AsyncIterator[asyncio.subprocess.Process]:
    """Another process, opening the event at `stream_seq` each time it is asked."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.store.key_holder", nats_url, str(stream_seq),
        cwd=REPO, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), timeout=10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def ask(process: asyncio.subprocess.Process) -> str:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"open\n")
    await process.stdin.drain()
    return (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode().strip()


async def test_a_deleted_tenants_keys_held_by_another_process_are_dropped_there(
    bus: Bus, tenant: str, nats_url: str
) -> None:
    """The tenant's key destroyed here (its deletion) is dropped at once by another process
    that had opened the tenant's thread: it no longer opens its events, though it read no
    `thread.deleted` and its keys' `ttl` is far off."""
    thread = new_id()
    done = await bus.store.append(tenant, "thread", thread, [said("held")], expected=Position())
    cipher = current_cipher()
    assert cipher is not None
    async with key_holder(nats_url, done.position.stream_seq) as other:
        assert await ask(other) == "opened message.appended"
        assert await cipher.destroy_tenant(tenant)

        async def refused() -> None:
            answer = await ask(other)
            assert answer.startswith("refused") and "was deleted" in answer, answer

        await assert_eventually(refused, timeout=10, interval=0.1)


async def test_a_tenant_key_held_by_a_vault_not_following_the_store_is_checked_again(
    bus: Bus, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that missed the destroyed entry uses the tenant key it holds no longer
    than `TENANT_RECHECK` before asking the store again, which refuses it."""
    thread = new_id()
    await bus.store.append(tenant, "thread", thread, [said("held")], expected=Position())
    holder = await KeyVault(bus.js, operator_keys()).open()
    assert await holder.data_key(tenant, thread, create=False) is not None
    cipher = current_cipher()
    assert cipher is not None
    assert await cipher.destroy_tenant(tenant)
    monkeypatch.setattr(vault, "TENANT_RECHECK", -1.0)  # the time has passed
    with pytest.raises(TenantKeyDestroyed):
        await holder.data_key(tenant, thread, create=False)


async def test_a_tenant_key_is_destroyed_though_the_key_store_left_the_first_ask_unanswered(
    bus: Bus, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key store does not answer the first ask of a tenant's deletion in time: the
    destruction is asked again (`DESTROY_RETRY`), not given up, and the key is gone."""
    thread = new_id()
    await bus.store.append(tenant, "thread", thread, [said("held")], expected=Position())
    cipher = current_cipher()
    assert cipher is not None
    keys = cipher._keys
    monkeypatch.setattr(keys, "timeout", 0.5)
    run_async, asks = keys.run_async, []

    async def first_unanswered(make: Any) -> Any:
        asks.append(make)

        async def late(vault: KeyVault) -> Any:
            await asyncio.sleep(5.0)  # past the ask's bound: the caller times out
            return await make(vault)

        return await run_async(late if len(asks) == 1 else make)

    monkeypatch.setattr(keys, "run_async", first_unanswered)

    assert await cipher.destroy_tenant(tenant)

    assert len(asks) == 2
    holder = await KeyVault(bus.js, operator_keys()).open()
    with pytest.raises(TenantKeyDestroyed):
        await holder.data_key(tenant, thread, create=False)


async def test_a_key_made_without_a_look_first_is_the_stored_one_when_it_existed(
    bus: Bus, tenant: str
) -> None:
    keys = await KeyVault(bus.js, operator_keys()).open()
    made = await keys.data_key(tenant, "root", create=True, fresh=True)

    again = await keys.data_key(tenant, "root", create=True, fresh=True)
    assert await keys.destroy(tenant, "root")

    assert made is not None and again == made
    with pytest.raises(PayloadErased):
        await keys.data_key(tenant, "root", create=True, fresh=True)
