"""What the tools service and a sandboxed worker exchange: one call in on stdin, one outcome
out on stdout, both JSON. Imported inside the sandbox too, so it needs msgspec only."""

from __future__ import annotations

from typing import Any

import msgspec


class SandboxCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call of an isolated tool, with the limits the worker sets on itself first."""

    module: str
    qualname: str
    arguments: dict[str, Any]
    tenant_id: str
    agency_id: str
    thread_id: str
    run_id: str
    call_id: str
    attempt: int
    env: dict[str, str] = {}
    cpu_seconds: int
    memory_bytes: int
    max_output_bytes: int


class _Outcome(msgspec.Struct, frozen=True, kw_only=True, tag_field="outcome"):
    pass


class Returned(_Outcome, frozen=True, kw_only=True, tag="returned"):
    """The tool's result, as the text the model sees (cut to `max_output_bytes`)."""

    output: str


class Failed(_Outcome, frozen=True, kw_only=True, tag="failed"):
    """The tool raised `ToolFailed`: its message is for the model, no retry."""

    message: str


class Retryable(_Outcome, frozen=True, kw_only=True, tag="retryable"):
    """The tool raised `ToolRetryable`: worth another attempt."""

    message: str


class Raised(_Outcome, frozen=True, kw_only=True, tag="raised"):
    """The tool (or importing it) raised anything else: `ExcType: message`, the line of the
    app's code it came from (`tracebacks.where`) and the traceback's text, for the log."""

    error: str
    raised_at: str = ""
    traceback: str = ""


class OutOfMemory(_Outcome, frozen=True, kw_only=True, tag="out_of_memory"):
    """An allocation failed at the worker's memory limit."""


SandboxOutcome = Returned | Failed | Retryable | Raised | OutOfMemory

call_encoder = msgspec.json.Encoder()
call_decoder = msgspec.json.Decoder(SandboxCall)
outcome_decoder = msgspec.json.Decoder(SandboxOutcome)
