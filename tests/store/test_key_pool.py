"""Root thread ids whose data key is made ahead (`infra/keystore/key_pool.py`): a tenant
creating threads one after the other finds one ready, a tenant creating now and then holds
none, and no id is handed out twice, held past its freshness, or left in the store unused
once the process closes."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from agency.contracts.events import MessageAppended
from agency.contracts.events.base import ChatMessage
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.infra.keystore import current_cipher, key_pool
from agency.infra.keystore.cipher import ThreadCipher
from agency.infra.keystore.key_pool import KeyPool
from agency.infra.keystore.operator import operator_keys
from tests.helpers import assert_eventually


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


class _Store:
    """What the pool asks of the key store, answered at once: the keys it made, the ones
    it erased."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []
        self.erased: list[tuple[str, str]] = []

    def make(self, tenant_id: str, ids: list[str]) -> Future[list[str]]:
        self.made += [(tenant_id, i) for i in ids]
        done: Future[list[str]] = Future()
        done.set_result(list(ids))
        return done

    def erase(self, tenant_id: str, thread_id: str) -> Future[Any]:
        self.erased.append((tenant_id, thread_id))
        done: Future[Any] = Future()
        done.set_result(1)
        return done


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    clock = _Clock()
    monkeypatch.setattr(key_pool.time, "monotonic", clock.monotonic)
    return clock


def test_a_tenant_creating_one_after_another_takes_ids_made_ahead_never_twice(
    clock: _Clock,
) -> None:
    store = _Store()
    pool = KeyPool(store.make, store.erase, size=8, low=2, fresh_for=30.0)

    taken = []
    for _ in range(40):
        taken.append(pool.take("ta"))
        clock.now += 0.01
    made = {thread_id for _, thread_id in store.made}

    assert len(set(taken)) == 40
    assert sum(t in made for t in taken) == 38  # all but the first two
    assert pool.ready("ta") <= 8
    assert len(store.made) <= 40 + 8
    assert store.erased == []


def test_a_tenant_creating_now_and_then_holds_no_key_made_ahead(clock: _Clock) -> None:
    store = _Store()
    pool = KeyPool(store.make, store.erase, size=8, low=2, fresh_for=30.0)

    for _ in range(5):
        pool.take("tb")
        clock.now += 31.0

    assert store.made == []


def test_an_id_held_past_its_freshness_is_erased_not_handed_out(clock: _Clock) -> None:
    store = _Store()
    pool = KeyPool(store.make, store.erase, size=8, low=2, fresh_for=30.0)
    taken = {pool.take("tc") for _ in range(6)}
    held = {thread_id for _, thread_id in store.made} - taken
    assert pool.ready("tc") == len(held) > 0

    clock.now += 30.0
    later = pool.take("tc")

    assert later not in held
    assert {thread_id for _, thread_id in store.erased} == held
    assert pool.ready("tc") == 0


def test_a_deleted_tenant_is_held_nothing_more(clock: _Clock) -> None:
    store = _Store()
    pool = KeyPool(store.make, store.erase, size=8, low=2, fresh_for=30.0)
    for _ in range(4):
        pool.take("td")
    assert pool.ready("td") > 0

    pool.drop_tenant("td")

    assert pool.ready("td") == 0
    assert {thread_id for _, thread_id in store.made}.isdisjoint({pool.take("td")})


def test_a_key_store_not_connected_yet_costs_a_take_nothing(clock: _Clock) -> None:
    erased: list[str] = []
    pool = KeyPool(lambda t, ids: None, lambda t, i: erased.append(i), size=8, low=2)

    ids = {pool.take("te") for _ in range(10)}

    assert len(ids) == 10 and pool.ready("te") == 0 and erased == []


def test_a_key_store_that_fails_to_start_a_batch_costs_a_take_nothing(clock: _Clock) -> None:
    def broken(tenant_id: str, ids: list[str]) -> Future[list[str]]:
        raise ConnectionError("the key store cannot connect")

    pool = KeyPool(broken, _Store().erase, size=8, low=2)

    ids = {pool.take("tf") for _ in range(10)}
    pool.close(timeout=0.0)  # nothing in flight is waited for

    assert len(ids) == 10 and pool.ready("tf") == 0


def said(text: str) -> MessageAppended:
    return MessageAppended(message=ChatMessage(role="user", content=text))


async def test_an_id_made_ahead_has_its_key_stored_and_its_thread_opens(
    bus: Bus, tenant: str
) -> None:
    cipher = current_cipher()
    assert cipher is not None
    await cipher.prepare(tenant, "warm")  # the key store's connection is up
    for _ in range(4):
        cipher.new_root_id(tenant)

    async def made() -> None:
        assert cipher.pool.ready(tenant) >= 2

    await assert_eventually(made)
    found = await cipher.vault_call(lambda v: v.entries(f"data.{tenant}."))
    stored = {e.rpartition(".")[2] for e in found}
    thread = cipher.new_root_id(tenant)
    assert thread in stored

    await bus.store.append(tenant, "thread", thread, [said("hello")], expected=Position())

    assert (await bus.store.read(tenant, "thread", thread))[0].payload == said("hello")


async def test_the_ids_left_unused_are_erased_from_the_store_when_the_process_closes(
    bus: Bus, tenant: str, nats_url: str
) -> None:
    own = ThreadCipher(nats_url, operator_keys())
    try:
        await own.prepare(tenant, "warm")  # the key store's connection is up
        for _ in range(4):
            own.new_root_id(tenant)  # ids made ahead from the second on, some in flight

        async def made() -> None:
            assert len(await own.vault_call(lambda v: v.entries(f"data.{tenant}."))) >= 2

        await assert_eventually(made)
    finally:
        own.close()

    cipher = current_cipher()
    assert cipher is not None
    after = await cipher.vault_call(lambda v: v.entries(f"data.{tenant}."))

    assert after == [f"data.{tenant}.warm"]
