"""The values a thread's state is made of (`state.ThreadState`): its runs as the fold sees
them, the requests queued behind the active run, and the outcome of each tool call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agency.contracts.events import ChatMessage, ClientTool, ToolCall

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
    # Static breakpoints before model calls: every one, or each after a tool step's results.
    pause_before_model: bool = False
    pause_after_tools: bool = False
    # The step whose model call an approval let through after the run paused before it
    # (reason `breakpoint`): that call is not paused for again.
    breakpoint_passed: int = 0
    # The run has started (`run.started`): a queued request that never did is canceled alone.
    started: bool = False
    # Tools its request's client runs itself: offered to the model, never run here.
    client_tools: tuple[ClientTool, ...] = ()
    # Asked for to start later (`run.delayed`): pending until its invoke is decided.
    delayed: bool = False
    # Messages an approval added (`hitl.resume`), not appended yet: they are, after the
    # step's tool results, before the next model call.
    held_messages: tuple[ChatMessage, ...] = ()

    def client_tool(self, name: str) -> bool:
        return any(t.name == name for t in self.client_tools)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def at_breakpoint(self) -> bool:
        """Paused at a breakpoint before its next model call, awaiting an approval."""
        return (
            self.status == "paused"
            and self.reason == "breakpoint"
            and self.breakpoint_passed != self.step + 1
        )


@dataclass(frozen=True, slots=True)
class QueuedRequest:
    run_id: str
    idempotency_key: str
    messages: tuple[ChatMessage, ...]
    files: tuple[tuple[str, str], ...]
    strategy: str = "queue"
    # The child whose report the messages are (a non-blocking subagent's result).
    reported_by: str | None = None
    # The blueprint its run runs as (the thread switches to it when the run starts).
    agent_type: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    output: str
    error: bool


def joined_tools(
    had: tuple[ClientTool, ...], joining: tuple[ClientTool, ...]
) -> tuple[ClientTool, ...]:
    """A run's client tools once a request joined it: the joining request's describe its
    client as it is now, so they win a name both have."""
    names = {t.name for t in joining}
    return (*(t for t in had if t.name not in names), *joining)
