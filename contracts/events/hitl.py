"""Human-in-the-loop: a run pauses on proposed calls until a person decides."""

from __future__ import annotations

from agency.contracts.events.base import Event, ToolCall


class HitlInterrupt(Event, frozen=True, kw_only=True, tag="hitl.interrupt"):
    run_id: str
    proposed_tool_calls: tuple[ToolCall, ...]


class HitlResume(Event, frozen=True, kw_only=True, tag="hitl.resume"):
    run_id: str
    approved: bool
    modified_tool_calls: tuple[ToolCall, ...] | None = None
    reason: str = ""
    # The approval's `stream_modes`: what a client's rejoin of the resumed run streams.
    stream_modes: tuple[str, ...] = ()


HitlEvent = HitlInterrupt | HitlResume
