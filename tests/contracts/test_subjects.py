"""Every value is validated before it becomes a subject token."""

from __future__ import annotations

import pytest

from agency.contracts.errors import InvalidToken
from agency.contracts.subjects import (
    aggregate_events_filter,
    command_subject,
    event_subject,
    legacy_event_subject,
    note_subject,
    notes_filter,
    tenant_events_filter,
)


def test_an_aggregate_instance_is_one_subject_whatever_its_event_types() -> None:
    assert event_subject("acme", "thread", "01J") == "tenant.acme.evt.thread.01J"
    assert tenant_events_filter("acme") == "tenant.acme.evt.>"
    assert aggregate_events_filter() == "tenant.*.evt.thread.*"
    assert aggregate_events_filter("workflow", "acme") == "tenant.acme.evt.workflow.*"
    assert command_subject("acme", "runtime", "invoke") == "tenant.acme.cmd.runtime.invoke"


def test_notes_and_the_previous_layout_name_the_event_type_as_a_token() -> None:
    assert note_subject("acme", "run.canceled") == "tenant.acme.note.run_canceled"
    assert notes_filter("run.canceled") == "tenant.*.note.run_canceled"
    assert legacy_event_subject("acme", "thread", "01J", "tool.started") == (
        "tenant.acme.evt.thread.01J.tool_started"
    )


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param("a.b", "no '.'", id="dot"),
        pytest.param("a*", "'*'", id="star"),
        pytest.param(">", "'>'", id="gt"),
        pytest.param("a b", "whitespace", id="space"),
        pytest.param("a\tb", "whitespace", id="tab"),
        pytest.param("", "must not be empty", id="empty"),
        pytest.param("x" * 65, "longer than 64", id="too-long"),
        pytest.param("é", "only letters", id="non-ascii"),
    ],
)
def test_bad_tokens_are_refused_with_the_problem_named(value: str, problem: str) -> None:
    with pytest.raises(InvalidToken, match="invalid tenant id") as info:
        tenant_events_filter(value)
    assert problem in str(info.value)
    with pytest.raises(InvalidToken):
        event_subject("acme", "thread", value)
    with pytest.raises(InvalidToken):
        command_subject("acme", value, "invoke")


def test_unknown_aggregate_is_refused() -> None:
    with pytest.raises(InvalidToken, match="aggregate"):
        event_subject("acme", "wallet", "x")
