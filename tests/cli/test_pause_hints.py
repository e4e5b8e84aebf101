"""What `agency threads invoke|approve --follow` says at a pause is what goes on from it, for
every reason a run pauses (`PauseReason`)."""

from __future__ import annotations

from typing import get_args

import pytest

from agency.contracts.events.run import PauseReason
from agency.services.cli.threads_client_cmd import describe

# Each reason: what the line must say, and what it must not.
HINTS = {
    "hitl": ("`agency threads approve t1` (or `--reject`) resumes it", "invoke"),
    "subagent": ("resumes by itself when they report", "agency threads"),
    "exhausted": ("`agency threads invoke t1 MESSAGE` continues it", "approve"),
    "breakpoint": ("before its model call; `agency threads approve t1` goes on", "--reject"),
    "error": ("nothing resumes it; `agency threads cancel t1` ends it", "approve"),
}


def test_every_pause_reason_has_its_own_hint() -> None:
    assert set(HINTS) == set(get_args(PauseReason))


@pytest.mark.parametrize("reason", sorted(HINTS))
def test_the_pause_line_says_what_goes_on_from_it(reason: str) -> None:
    line = describe("run.paused", {"runId": "r1", "reason": reason}, "t1")
    said, unsaid = HINTS[reason]
    assert line is not None and line.startswith(f"⏸ paused ({reason}); ")
    assert said in line and unsaid not in line
