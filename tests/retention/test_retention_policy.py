"""The levels of retention (docs/data.md, "Retention"): durations as the operator writes
them, and the shortest level set holding."""

from __future__ import annotations

import pytest

from agency.services.threads.retention_policy import (
    DAY,
    RetentionSettings,
    Standing,
    parse_days,
    refusal,
    tenant_refusal,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30 * DAY), ("0.5", DAY / 2), ("45s", 45.0), ("10m", 600.0), ("12h", 43200.0),
     ("30d", 30 * DAY), ("off", 0.0), ("0", 0.0), ("", 0.0)],
)  # fmt: skip
def test_a_duration_is_days_or_a_number_with_a_unit(text: str, seconds: float) -> None:
    assert parse_days(text, "AGENCY_RETENTION_DAYS") == seconds


def test_a_duration_that_is_not_one_names_the_variable() -> None:
    with pytest.raises(ValueError, match="AGENCY_RETENTION_MAX_DAYS='a week'"):
        parse_days("a week", "AGENCY_RETENTION_MAX_DAYS")


def test_the_operators_maximum_bounds_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENCY_RETENTION_MAX_DAYS", "30")
    assert RetentionSettings.from_env().default_seconds == 30 * DAY
    monkeypatch.setenv("AGENCY_RETENTION_DAYS", "90")
    assert RetentionSettings.from_env().default_seconds == 30 * DAY
    monkeypatch.setenv("AGENCY_RETENTION_DAYS", "7")
    assert RetentionSettings.from_env().default_seconds == 7 * DAY
    monkeypatch.setenv("AGENCY_RETENTION_SWEEP_SECONDS", "0")
    with pytest.raises(ValueError, match="AGENCY_RETENTION_SWEEP_SECONDS"):
        RetentionSettings.from_env()


def test_the_shortest_level_set_holds() -> None:
    operator = RetentionSettings(default_seconds=30 * DAY, max_seconds=90 * DAY)
    assert Standing(operator).tenant_seconds == 30 * DAY
    assert Standing(operator, tenant=60 * DAY).agency_seconds == 60 * DAY
    assert Standing(operator, tenant=60 * DAY, agency=7 * DAY).agency_seconds == 7 * DAY
    # An agency's 0 is no limit of its own: the tenant's holds.
    assert Standing(operator, tenant=60 * DAY, agency=0).agency_seconds == 60 * DAY
    held = Standing(operator, tenant=60 * DAY, agency=7 * DAY)
    assert held.thread_seconds(60.0) == 60.0 and held.thread_seconds(None) == 7 * DAY
    assert held.thread_seconds(30 * DAY) == 7 * DAY
    # Nothing set anywhere: threads are kept.
    assert Standing(RetentionSettings()).thread_seconds(None) == 0


def test_a_level_beyond_the_one_above_is_refused_naming_it() -> None:
    operator = RetentionSettings(max_seconds=DAY)
    assert tenant_refusal(2 * DAY, operator) == (
        "retention must be within the operator's maximum, 1 day"
    )
    assert tenant_refusal(0, operator) is not None
    assert tenant_refusal(0, RetentionSettings()) is None
    assert tenant_refusal(None, operator) is None
    assert refusal(-1, 0, "the tenant's") is not None
    assert (
        refusal(90.0, 60.0, "the tenant's") == "retention must be within the tenant's, 60 seconds"
    )
