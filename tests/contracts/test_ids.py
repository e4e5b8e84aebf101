"""Ids: ULIDs that read back as such, carry their creation time and sort by it."""

from __future__ import annotations

import time

from ulid import ULID

from agency.contracts.ids import new_id, validate_token


def test_a_new_id_is_a_ulid_of_its_creation_time() -> None:
    before = time.time()
    ids = [new_id() for _ in range(2000)]
    after = time.time()
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = ULID.from_str(value)
        assert str(parsed) == value and len(value) == 26
        assert before - 0.001 <= parsed.timestamp <= after + 0.001
        assert validate_token("id", value) == value


def test_ids_of_later_milliseconds_sort_later() -> None:
    first = new_id()
    start = time.monotonic()
    while time.monotonic() - start < 0.002:  # into the next millisecond at least
        pass
    assert new_id()[:10] > first[:10]
