"""The run state machine. A run ends in exactly one of completed, error or canceled."""

from __future__ import annotations

from typing import Literal

from agency.contracts.events.base import Event

# `breakpoint`: before a model call, as the run's invoke asked (a static breakpoint: its
# `pause_before_model` or `pause_after_tools`); an approval (`hitl.resume`) lets it go on.
PauseReason = Literal["hitl", "error", "exhausted", "subagent", "breakpoint"]


class RunStarted(Event, frozen=True, kw_only=True, tag="run.started"):
    run_id: str
    agent_type: str
    max_steps: int


class RunTick(Event, frozen=True, kw_only=True, tag="run.tick"):
    run_id: str
    step: int


class RunPaused(Event, frozen=True, kw_only=True, tag="run.paused"):
    run_id: str
    reason: PauseReason


class RunResumed(Event, frozen=True, kw_only=True, tag="run.resumed"):
    """The run goes on. Resuming from `exhausted` raises its step limit to `max_steps`
    (another blueprint's worth of steps); 0 keeps the limit it had."""

    run_id: str
    max_steps: int = 0


class RunCompleted(Event, frozen=True, kw_only=True, tag="run.completed"):
    """`attachments`: the files a dual-AI session returns to its parent, named by its
    `session_stop` tool; None (any other end) returns every file the run wrote."""

    run_id: str
    result: str = ""
    attachments: tuple[str, ...] | None = None


class RunError(Event, frozen=True, kw_only=True, tag="run.error"):
    """`attachments`: as `RunCompleted`'s, named by a `session_fail` tool."""

    run_id: str
    error: str
    kind: str = "error"
    attachments: tuple[str, ...] | None = None


class RunCanceled(Event, frozen=True, kw_only=True, tag="run.canceled"):
    run_id: str
    reason: str = ""


class AgentStarted(Event, frozen=True, kw_only=True, tag="agent.started"):
    run_id: str
    agent_type: str
    model: str


class AgentCompleted(Event, frozen=True, kw_only=True, tag="agent.completed"):
    run_id: str
    result: str = ""


class AgentError(Event, frozen=True, kw_only=True, tag="agent.error"):
    """An error inside a step. Whether the run goes on is told by the run events."""

    run_id: str
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
    | AgentStarted
    | AgentCompleted
    | AgentError
)
