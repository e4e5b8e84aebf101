"""Subagents: child threads spawned by a parent's tool call, reporting back to it."""

from __future__ import annotations

from typing import Literal

from contracts.events.base import Event

ChildOutcome = Literal["completed", "error", "canceled", "timeout"]


class SubagentRequested(Event, frozen=True, kw_only=True, tag="subagent.requested"):
    run_id: str
    tool_call_id: str
    subagent_type: str
    description: str
    timeout_ms: int | None = None
    blocking: bool = True


class SubagentSpawned(Event, frozen=True, kw_only=True, tag="subagent.spawned"):
    run_id: str
    tool_call_id: str
    child_thread_id: str
    token: str
    subagent_type: str


class SubagentCompleted(Event, frozen=True, kw_only=True, tag="subagent.completed"):
    run_id: str
    tool_call_id: str
    child_thread_id: str
    outcome: ChildOutcome
    report: str = ""


SubagentEvent = SubagentRequested | SubagentSpawned | SubagentCompleted
