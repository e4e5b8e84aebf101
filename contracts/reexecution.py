"""Re-execution over the bus: what the API asks the runtime, and the runtime's answer.

`tenant.<t>.req.runtime.reexecute` (`reexecution_subject`) is a plain NATS request, kept
in no stream: the runtime answers it (`services/runtime/replay/responder.py`) by running
its current code over the recorded thread (or its tree) in memory and comparing. Only
`AGENCY`'s own users reach it: a tenant's account imports no `req` subject. Snake_case,
as everything on NATS; the API turns the report into its HTTP body.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agency.contracts.envelope import Envelope

# How long the runtime gives one re-execution (reading the record included); whoever asks
# waits a little longer, so the runtime's own answer ("timeout") arrives first.
REEXECUTION_SECONDS = 60.0

# `busy`: the runtime is at its bound of re-executions at once; `timeout`: it took longer
# than REEXECUTION_SECONDS; `too_large`: the report exceeds the largest message the broker
# carries; `invalid`: the request is malformed; `not_found`: the tenant has no such thread;
# `failed`: the record could not be read.
Refusal = Literal["busy", "timeout", "too_large", "invalid", "not_found", "failed"]


class ReexecutionRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    thread_id: str
    # The thread with its subagents (and theirs), or the thread alone.
    tree: bool = True


class ComparedEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One event of either side: recorded (from the log) or re-executed (never stored)."""

    envelope: Envelope
    stream_seq: int


class FirstDivergence(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    differences: tuple[str, ...]


class ThreadComparison(msgspec.Struct, frozen=True, kw_only=True):
    thread_id: str
    parent_id: str | None
    depth: int
    same: bool
    compared: int
    divergence: FirstDivergence | None
    # Why the re-execution ended early: the record ran out (a note), or the code raised.
    note: str | None
    error: str | None
    recorded: tuple[ComparedEvent, ...]
    reexecuted: tuple[ComparedEvent, ...]


class ReexecutionReport(msgspec.Struct, frozen=True, kw_only=True):
    same: bool
    compared: int
    threads: tuple[ThreadComparison, ...]


class ReexecutionReply(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The report, or why there is none."""

    report: ReexecutionReport | None = None
    refused: Refusal | None = None
    reason: str = ""
