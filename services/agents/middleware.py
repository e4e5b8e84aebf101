"""Middleware: hooks around the model call and tool execution, selected by tags.

Hooks, as in the seed's agent system: `before_model` (shape the request), `on_model_result`
(react to the answer, e.g. ask for approval), `on_tool_start`, `on_tool_result`,
`on_tool_error` and `on_resume`. A middleware may also contribute a system prompt, state
tools, external tools and entries of the thread state shown by `/state`. In a child thread
a hook may escalate to the parent with `ctx.notify_parent(content)` and
`ctx.set_status(status)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contracts.events import AnyEvent, BlueprintSpec, ChatMessage, ToolCall
from contracts.events.registry import BlueprintConfig
from services.agents.escalation import notify_event, status_event
from services.agents.tools import StateTool, SubagentTool, Tool, ToolSpec

if TYPE_CHECKING:
    from services.runtime.state import ThreadState


@dataclass
class ModelPlan:
    """The request being built for one model call; `before_model` hooks edit it."""

    model: str
    system_prompts: list[str]
    messages: list[ChatMessage]
    tools: list[ToolSpec]
    token_budget: int | None = None


@dataclass
class MiddlewareContext:
    """What a hook sees and how it acts: `emit` adds events to the step, `pause` stops it."""

    state: ThreadState
    blueprint: BlueprintSpec
    run_id: str
    step: int
    emitted: list[AnyEvent] = field(default_factory=list)
    pause_reason: str | None = None
    held_calls: list[ToolCall] = field(default_factory=list)

    @property
    def config(self) -> BlueprintConfig:
        return self.blueprint.config

    def emit(self, event: AnyEvent) -> None:
        self.emitted.append(event)

    def notify_parent(self, content: str) -> None:
        """Escalate `content` to the parent thread: it is queued there as a message (the
        seed's `state.notifyParent`). Raises `NotAChild` on a thread without a parent."""
        self.emit(notify_event(self.state, self.run_id, content))

    def set_status(self, status: str) -> None:
        """Set this child's status text in the parent's registry without ending anything
        (the seed's `state.setStatus`). Raises `NotAChild` on a thread without a parent."""
        self.emit(status_event(self.state, self.run_id, status))

    def hold_for_approval(self, calls: list[ToolCall]) -> None:
        """Pause the run on these calls until a person approves, edits or rejects them."""
        self.held_calls.extend(calls)
        self.pause_reason = "hitl"


class Middleware:
    """Subclass and override what you need; every hook defaults to doing nothing."""

    name: str = "middleware"
    tags: tuple[str, ...] = ()

    def system_prompt(self, ctx: MiddlewareContext) -> str | None:
        return None

    def state_tools(self) -> tuple[StateTool, ...]:
        return ()

    def tools(self) -> tuple[Tool, ...]:
        return ()

    def subagent_tools(self) -> tuple[SubagentTool, ...]:
        return ()

    def state(self, state: ThreadState) -> dict[str, Any]:
        return {}

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        return None

    async def on_model_result(self, ctx: MiddlewareContext, message: ChatMessage) -> None:
        return None

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        return None

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        return None

    async def on_tool_error(self, ctx: MiddlewareContext, call: ToolCall, error: str) -> None:
        return None

    async def on_resume(self, ctx: MiddlewareContext, reason: str, payload: Any) -> None:
        return None
