"""Every value is validated before it becomes a subject token."""

from __future__ import annotations

import pytest

from agency.contracts.errors import InvalidToken
from agency.contracts.subjects import (
    aggregate_filter,
    command_subject,
    event_subject,
    events_of_type_filter,
    tenant_events_filter,
)


def test_event_subject_has_tenant_aggregate_id_and_type_token() -> None:
    assert event_subject("acme", "thread", "01J", "tool.started") == (
        "tenant.acme.evt.thread.01J.tool_started"
    )
    assert aggregate_filter("acme", "thread", "01J") == "tenant.acme.evt.thread.01J.>"
    assert tenant_events_filter("acme") == "tenant.acme.evt.>"
    assert events_of_type_filter("tool.requested") == "tenant.*.evt.thread.*.tool_requested"
    assert command_subject("acme", "runtime", "invoke") == "tenant.acme.cmd.runtime.invoke"


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
        event_subject("acme", "thread", value, "run.tick")
    with pytest.raises(InvalidToken):
        command_subject("acme", value, "invoke")


def test_unknown_aggregate_is_refused() -> None:
    with pytest.raises(InvalidToken, match="aggregate"):
        aggregate_filter("acme", "wallet", "x")
