"""The values a thread's state is made of (`state.ThreadState`): its runs as the fold sees
them, the requests queued behind the active run, and the outcome of each tool call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agency.contracts.events import ChatMessage, ToolCall

# `injected`: a queued request that joined the active run (`reason` names that run).
RunStatus = Literal["registered", "running", "paused", "completed", "canceled", "error", "injected"]
TERMINAL: frozenset[str] = frozenset({"completed", "canceled", "error", "injected"})


@dataclass(frozen=True, slots=True)
class RunView:
    run_id: str
    status: RunStatus = "registered"
    step: int = 0
    reason: str | None = None
    agent_type: str = ""
    max_steps: int = 0
    result: str = ""
    error: str = ""
    # Tool calls a person must decide on, and what they decided (id → call to run).
    hitl_pending: tuple[ToolCall, ...] = ()
    hitl_overrides: tuple[tuple[str, ToolCall], ...] = ()
    hitl_rejected: frozenset[str] = frozenset()
    # Every tool call of the run waits for approval (its `request.accepted` asked so).
    pause_before_tools: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    run_id: str
    idempotency_key: str
    messages: tuple[ChatMessage, ...]
    files: tuple[tuple[str, str], ...]
    strategy: str = "queue"
    # The child whose report the messages are (a non-blocking subagent's result).
    reported_by: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: str
    error: bool
