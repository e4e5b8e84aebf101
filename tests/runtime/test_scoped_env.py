"""Scoped variables: sealing, and where a spawn finds each value."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

import msgspec
import pytest

from agency.contracts.events import AnyEvent, SubagentVariablesProvided, ThreadCreated
from agency.contracts.events.blueprint import ImmediateConfig, SubagentEntry
from agency.domain.thread_state import fold
from agency.infra.jetstream.envelopes import new_envelopes
from agency.infra.jetstream.ports import Append
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.infra.sealing import (
    KEY_FILE,
    KEY_VARIABLE,
    UnsealError,
    key_in,
    seal,
    unseal,
    use_key_of,
)
from agency.services.runtime.scoped import scoped_values


def test_values_are_sealed_not_in_clear_and_open_only_with_the_same_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "one deployment")
    token = seal({"API_TOKEN": "s3cret-value"})
    assert "s3cret-value" not in token and "API_TOKEN" not in token
    assert unseal(token) == {"API_TOKEN": "s3cret-value"}
    assert seal({}) == "" and unseal("") == {}
    monkeypatch.setenv(KEY_VARIABLE, "another deployment")
    with pytest.raises(UnsealError, match=KEY_VARIABLE):
        unseal(token)
    with pytest.raises(UnsealError):
        unseal("garbage")


def thread(*payloads: AnyEvent) -> list[RecordedEvent]:
    envelopes = new_envelopes(
        Append("t1", "thread", "th1", list(payloads), Position(), EventContext())
    )
    return [
        RecordedEvent(envelope=e, stream_seq=i + 1, subject="") for i, e in enumerate(envelopes)
    ]


def test_a_value_comes_from_the_environment_else_from_what_was_provided() -> None:
    provided = SubagentVariablesProvided(
        request_id="var_1", names=("B",), sealed_env=seal({"B": "from post", "A": "old"})
    )
    state = fold("t1", "th1", thread(ThreadCreated(agency_id="a", agent_type="x"), provided))
    assert scoped_values(state, ("A", "B", "C"), {"A": "from env", "C": ""}) == (
        {"A": "from env", "B": "from post"},
        ("C",),
    )
    assert scoped_values(state, (), {}) == ({}, ())


def test_a_child_reads_its_scope_from_its_creation() -> None:
    created = ThreadCreated(agency_id="a", agent_type="x", sealed_env=seal({"K": "v"}))
    assert unseal(fold("t1", "th1", thread(created)).sealed_env) == {"K": "v"}


def test_immediate_takes_true_or_the_object_form_only() -> None:
    entry = msgspec.convert(
        {"name": "w", "immediate": {"name_env": "N", "scoped_env": ["S"]}}, SubagentEntry
    )
    assert entry.immediate_config == ImmediateConfig(name_env="N", scoped_env=("S",))
    assert entry.scoped_env == ("S",)
    assert msgspec.convert({"name": "w", "immediate": True}, SubagentEntry).scoped_env == ()
    assert msgspec.convert({"name": "w"}, SubagentEntry).immediate_config is None
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"name": "w", "immediate": {"scoped_env": ["not a name"]}}, SubagentEntry)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"name": "w", "immediate": {"bogus": 1}}, SubagentEntry)


def test_a_data_directory_gives_its_processes_one_private_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    use_key_of(tmp_path)
    first = os.environ[KEY_VARIABLE]
    assert len(first) >= 32
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    token = seal({"TOKEN": "s3cret"})
    # Another process on the same directory (`agency serve`) opens what this one sealed.
    monkeypatch.delenv(KEY_VARIABLE)
    use_key_of(tmp_path)
    assert os.environ[KEY_VARIABLE] == first
    assert unseal(token) == {"TOKEN": "s3cret"}
    # A key set by the operator wins, and the file is left as it is.
    monkeypatch.setenv(KEY_VARIABLE, "operator-key")
    use_key_of(tmp_path)
    assert os.environ[KEY_VARIABLE] == "operator-key"
    with pytest.raises(UnsealError):
        unseal(token)


def test_a_key_another_process_made_meanwhile_is_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every service started at once on a fresh data directory: one finds no key, and
    another makes it before the first one writes its own. The first takes theirs rather
    than fail (or read a file not written yet), and leaves nothing else behind."""
    made = secrets.token_urlsafe

    def theirs_first(nbytes: int | None = None) -> str:
        (tmp_path / KEY_FILE).write_text("theirs\n")
        return made(nbytes)

    monkeypatch.setattr(secrets, "token_urlsafe", theirs_first)
    assert key_in(tmp_path) == "theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY_FILE]
    monkeypatch.setattr(secrets, "token_urlsafe", made)
    # Found whole, or made whole: never a key read from a file being written.
    assert key_in(tmp_path) == "theirs"
    (tmp_path / KEY_FILE).write_text("")
    with pytest.raises(RuntimeError, match="empty"):
        key_in(tmp_path)
