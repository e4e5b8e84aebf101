from __future__ import annotations

import pytest

from agency.contracts.errors import StructuredError
from agency.infra.jetstream.errors import BatchTooLarge, ConcurrencyError, StoreError
from agency.infra.launch.errors import CommandFailed, PortInUse


def test_an_error_holds_its_fields_and_says_them_in_its_message() -> None:
    error = BatchTooLarge(1200, 1000)
    assert (error.size, error.limit) == (1200, 1000)
    assert str(error) == (
        "a batch of 1200 events exceeds the atomic batch limit of 1000; "
        "split the decision into smaller ones"
    )
    assert error.args == (str(error),)
    assert repr(error) == f"BatchTooLarge({str(error)!r})"


def test_a_message_that_needs_code_is_described_and_keywords_name_the_fields() -> None:
    error = ConcurrencyError(aggregate_subject="s", expected_stream_seq=3, actual_stream_seq=None)
    assert "actual unknown (another append in flight)" in str(error)
    failed = CommandFailed("postgres", ["initdb", "-D", "x"], None, "")
    assert failed.argv == ("initdb", "-D", "x")
    assert str(failed) == "postgres: `initdb -D x` timed out"


def test_a_base_is_raised_with_a_message_and_a_subclass_keeps_its_parents_fields() -> None:
    with pytest.raises(StoreError, match=r"^unreadable answer$"):
        raise StoreError("unreadable answer")
    taken = PortInUse("nats", 1, "")
    assert (taken.component, taken.returncode) == ("nats", 1)
    assert str(taken) == "nats exited with code 1 during start"


def test_errors_are_equal_only_to_themselves() -> None:
    class Missing(StructuredError):
        key: str
        message = "no {key!r}"

    assert Missing("a") != Missing("a")
    assert str(Missing("a")) == "no 'a'"
