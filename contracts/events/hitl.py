"""Human-in-the-loop: a run pauses on proposed calls until a person decides."""

from __future__ import annotations

from agency.contracts.events.base import ChatMessage, InRun, ToolCall


class HitlInterrupt(InRun, frozen=True, kw_only=True, tag="hitl.interrupt"):
    proposed_tool_calls: tuple[ToolCall, ...]


class HitlResume(InRun, frozen=True, kw_only=True, tag="hitl.resume"):
    approved: bool
    modified_tool_calls: tuple[ToolCall, ...] | None = None
    reason: str = ""
    # The approval's `stream_modes`: what a client's rejoin of the resumed run streams.
    stream_modes: tuple[str, ...] = ()
    # Messages the approval adds to the run's state: appended (`message.appended`) after
    # the step's tool results, before the run's next model call.
    messages: tuple[ChatMessage, ...] = ()


HitlEvent = HitlInterrupt | HitlResume
