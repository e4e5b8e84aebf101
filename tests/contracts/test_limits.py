"""Limits read from the environment and the truncation that keeps content within them."""

from __future__ import annotations

import pytest

from agency.contracts.limits import InvalidLimit, Limits, is_truncated, truncate_text


def test_text_within_the_limit_is_kept_as_is() -> None:
    assert truncate_text("héllo", 6) == "héllo"


def test_long_text_is_cut_within_the_limit_with_a_marker_counting_the_omitted_bytes() -> None:
    text = "x" * 812_345 + "é" * 100_000
    cut = truncate_text(text, 256 * 1024)
    assert len(cut.encode()) <= 256 * 1024
    assert is_truncated(cut)
    head, _, marker = cut.partition("… [truncated: ")
    omitted = int(marker.removesuffix(" bytes omitted]"))
    assert len(head.encode()) + omitted == len(text.encode())
    assert text.startswith(head)


def test_a_cut_never_splits_a_character() -> None:
    cut = truncate_text("é" * 1000, 101)
    assert cut.encode().decode() == cut
    assert set(cut.partition("…")[0]) == {"é"}


def test_limits_come_from_the_environment_with_defaults() -> None:
    limits = Limits.from_env({"AGENCY_MAX_TOOL_OUTPUT_BYTES": "1000"})
    assert limits.max_tool_output_bytes == 1000
    assert limits.max_file_bytes == 256 * 1024
    assert limits.max_event_bytes == 1024 * 1024


@pytest.mark.parametrize("raw", ["lots", "0", "-5"])
def test_a_limit_that_is_no_positive_integer_is_refused_by_name(raw: str) -> None:
    with pytest.raises(InvalidLimit, match=f"AGENCY_MAX_FILE_BYTES='{raw}'"):
        Limits.from_env({"AGENCY_MAX_FILE_BYTES": raw})
