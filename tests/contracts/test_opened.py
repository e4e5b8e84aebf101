"""Sealed events opened once per process (`contracts.opened`): bounded, timed, and dropped
with their tree's key or on its `thread.deleted`, and with their tenant's key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agency.contracts.codec import decode_event, encode_event
from agency.contracts.envelope import Envelope, utc_now
from agency.contracts.events import ThreadDeleted
from agency.contracts.opened import OPENED, OpenedEvents
from agency.contracts.sealed import PayloadErased, install_cipher, installed_cipher
from agency.infra.jetstream.envelopes import encode_checked
from tests.contracts.test_sealed import LocalCipher, completed, envelope


class CountingCipher(LocalCipher):
    def __init__(self) -> None:
        super().__init__()
        self.opened = 0

    def open(self, tenant_id: str, key_id: str, ciphertext: bytes, aad: bytes) -> bytes:
        self.opened += 1
        return super().open(tenant_id, key_id, ciphertext, aad)


@pytest.fixture
def counting() -> Iterator[CountingCipher]:
    previous = installed_cipher()
    counted = CountingCipher()
    install_cipher(counted)
    OPENED.clear()
    yield counted
    OPENED.clear()
    install_cipher(previous)


def tombstone(root: str) -> Envelope:
    return Envelope(
        event_id="e9",
        tenant_id="acme",
        aggregate="thread",
        aggregate_id=root,
        seq=9,
        ts=utc_now(),
        type="thread.deleted",
        version=1,
        payload=ThreadDeleted(requested_by="admin", root_thread_id=root, tree=(root,)),
    )


def test_a_sealed_event_read_again_is_not_opened_again(counting: CountingCipher) -> None:
    original = envelope(completed())
    data = encode_event(original)
    assert decode_event(data) == original
    assert decode_event(bytes(bytearray(data))) == original  # equal bytes, another object
    assert counting.opened == 1


def test_an_event_sealed_for_an_append_reads_back_unopened(counting: CountingCipher) -> None:
    original = envelope(completed())
    [data] = encode_checked([original])
    assert decode_event(data) == original
    assert counting.opened == 0
    OPENED.clear()
    assert decode_event(data) == original  # as a reader that did not write it opens it
    assert counting.opened == 1


def test_a_thread_deleted_drops_what_was_opened_of_its_tree(counting: CountingCipher) -> None:
    data = encode_event(envelope(completed()))
    other = encode_event(envelope(completed(), correlation="root2"))
    decode_event(data), decode_event(other)
    counting.keys.clear()  # the keys destroyed; what was opened still held
    decode_event(data)

    decode_event(encode_event(tombstone("th1")))
    with pytest.raises(PayloadErased, match="th1"):
        decode_event(data)
    decode_event(other)  # another tree's event is kept
    assert counting.opened == 3


def test_an_opened_event_is_held_for_its_ttl_only() -> None:
    now = [100.0]
    cache = OpenedEvents(ttl=10.0, clock=lambda: now[0])
    event = envelope(completed())
    cache.put(b"a", event, "acme", "th1")
    now[0] = 109.0
    assert cache.get(b"a") == event
    now[0] = 110.5
    assert cache.get(b"a") is None
    assert len(cache) == 0 and cache.size == 0


def test_the_cache_is_bounded_by_entries_and_bytes_least_recently_read_first() -> None:
    event = envelope(completed())
    cache = OpenedEvents(entries=2, size=100)
    cache.put(b"a", event, "acme", "th1")
    cache.put(b"b", event, "acme", "th1")
    assert cache.get(b"a") is not None  # read: b is now the least recent
    cache.put(b"c", event, "acme", "th2")
    assert cache.get(b"b") is None and cache.get(b"a") is not None and len(cache) == 2

    sized = OpenedEvents(entries=10, size=100)
    for name in (b"a", b"b", b"c"):
        sized.put(name, event, "acme", "th1")
    sized.put(b"x" * 98, event, "acme", "th3")  # 101 bytes with the others: a goes
    assert sized.get(b"a") is None and sized.get(b"b") is not None
    assert sized.size == 100
    sized.put(b"y" * 101, event, "acme", "th3")  # larger than the whole cache: not held
    assert sized.get(b"y" * 101) is None and sized.size == 100


def test_forgetting_a_tree_drops_its_events_only() -> None:
    event = envelope(completed())
    cache = OpenedEvents()
    cache.put(b"a", event, "acme", "th1")
    cache.put(b"b", event, "acme", "th2")
    cache.put(b"c", event, "other", "th1")
    cache.forget("acme", "th1")
    assert cache.get(b"a") is None
    assert cache.get(b"b") is not None and cache.get(b"c") is not None
    assert cache.size == 2


def test_forgetting_a_tenant_drops_every_tree_of_it_only() -> None:
    event = envelope(completed())
    cache = OpenedEvents()
    cache.put(b"a", event, "acme", "th1")
    cache.put(b"b", event, "acme", "th2")
    cache.put(b"c", event, "other", "th1")
    cache.forget_tenant("acme")
    assert cache.get(b"a") is None and cache.get(b"b") is None
    assert cache.get(b"c") is not None
    assert len(cache) == 1 and cache.size == 1
