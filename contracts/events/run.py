"""The run state machine. A run ends in exactly one of completed, error or canceled."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from agency.contracts.events.base import InRun

# `breakpoint`: before a model call, as the run's invoke asked (a static breakpoint: its
# `pause_before_model` or `pause_after_tools`); an approval (`hitl.resume`) lets it go on.
PauseReason = Literal["hitl", "error", "exhausted", "subagent", "breakpoint"]


class RunStarted(InRun, frozen=True, kw_only=True, tag="run.started"):
    agent_type: str
    max_steps: int


class RunTick(InRun, frozen=True, kw_only=True, tag="run.tick"):
    step: int


class RunPaused(InRun, frozen=True, kw_only=True, tag="run.paused"):
    reason: PauseReason


class RunResumed(InRun, frozen=True, kw_only=True, tag="run.resumed"):
    """The run goes on. Resuming from `exhausted` raises its step limit to `max_steps`
    (another blueprint's worth of steps); 0 keeps the limit it had."""

    max_steps: int = 0


class RunCompleted(InRun, frozen=True, kw_only=True, tag="run.completed"):
    """`attachments`: the files a dual-AI session returns to its parent, named by its
    `session_stop` tool; None (any other end) returns every file the run wrote."""

    result: str = ""
    attachments: tuple[str, ...] | None = None


class RunError(InRun, frozen=True, kw_only=True, tag="run.error"):
    """`attachments`: as `RunCompleted`'s, named by a `session_fail` tool."""

    error: str
    kind: str = "error"
    attachments: tuple[str, ...] | None = None


class RunDelayed(InRun, frozen=True, kw_only=True, tag="run.delayed"):
    """A run asked for now and to start at `not_before` (LangGraph's `after_seconds`): it
    is pending until its invoke, held by the broker until then, is decided; canceled
    before (`run.canceled`), it never starts."""

    not_before: datetime


class RunCanceled(InRun, frozen=True, kw_only=True, tag="run.canceled"):
    reason: str = ""


class AgentStarted(InRun, frozen=True, kw_only=True, tag="agent.started"):
    agent_type: str
    model: str


class AgentCompleted(InRun, frozen=True, kw_only=True, tag="agent.completed"):
    result: str = ""


class AgentError(InRun, frozen=True, kw_only=True, tag="agent.error"):
    """An error inside a step. Whether the run goes on is told by the run events."""

    error: str
    retryable: bool = False


RUN_TERMINAL_TYPES: frozenset[str] = frozenset({"run.completed", "run.error", "run.canceled"})

RunEvent = (
    RunStarted
    | RunTick
    | RunPaused
    | RunResumed
    | RunCompleted
    | RunError
    | RunCanceled
    | RunDelayed
    | AgentStarted
    | AgentCompleted
    | AgentError
)
