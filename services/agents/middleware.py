"""Middleware: hooks around the model call and tool execution, selected by tags.

Hooks, as in the seed's agent system: `before_model` (shape the request), `on_model_result`
(react to the answer, e.g. ask for approval), `on_tool_start`, `on_tool_result`,
`on_tool_error`, `on_resume` and `on_child_report`. A middleware may also contribute a
system prompt, state tools, external tools and a part of the thread state shown by `/state`
(`state`), computed from the thread's folded log alone, so a replay shows the same part. In
a child thread a hook may escalate to the parent with `ctx.notify_parent(content)` and
`ctx.set_status(status)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog

from agency.contracts.events import AnyEvent, BlueprintSpec, ChatMessage, ToolCall, ToolRegistered
from agency.contracts.events.blueprint import BlueprintConfig
from agency.services.agents.escalation import notify_event, status_event
from agency.services.agents.tools import StateTool, SubagentTool, Tool, ToolSpec
from agency.services.agents.view import ThreadView

log = structlog.get_logger(__name__)

RegistrableTool = StateTool | Tool

# The keys `/state` has of its own (camelCase): a middleware's part cannot take one.
RESERVED_STATE_KEYS = frozenset({
    "messages", "tools", "thread", "threadId", "parent", "agentType", "model", "todos",
    "files", "pendingToolCalls", "subagents",
})  # fmt: skip


@dataclass
class ModelPlan:
    """The request being built for one model call; `before_model` hooks edit it."""

    model: str
    system_prompts: list[str]
    messages: list[ChatMessage]
    tools: list[ToolSpec]
    token_budget: int | None = None


@dataclass
class ChildReport:
    """A child's report reaching its parent (the seed's `onChildReport` argument).

    `report` is what the parent is given: the blocking call's tool message, or the message
    queued for a non-blocking child. A hook may change it; what it emits is appended with it.
    """

    thread_id: str
    token: str
    tool_call_id: str
    outcome: str
    report: str
    blocking: bool


@dataclass
class MiddlewareContext:
    """What a hook sees and how it acts: `state` is the thread (read-only), `emit` adds
    events to the step, `hold_for_approval` pauses it."""

    state: ThreadView
    blueprint: BlueprintSpec
    run_id: str
    step: int
    emitted: list[AnyEvent] = field(default_factory=list)
    pause_reason: str | None = None
    held_calls: list[ToolCall] = field(default_factory=list)
    # The tools the blueprint's middleware may register: name → (middleware name, tool).
    registrable: Mapping[str, tuple[str, RegistrableTool]] = field(default_factory=dict)

    @property
    def config(self) -> BlueprintConfig:
        """The blueprint's config; a middleware's own settings are in `config.extra`."""
        return self.blueprint.config

    def emit(self, event: AnyEvent) -> None:
        """Add `event` to the step: it is appended with what triggered the hook."""
        self.emitted.append(event)

    def notify_parent(self, content: str) -> None:
        """Escalate `content` to the parent thread: it is queued there as a message (the
        seed's `state.notifyParent`). Raises `NotAChild` on a thread without a parent."""
        self.emit(notify_event(self.state, self.run_id, content))

    def set_status(self, status: str) -> None:
        """Set this child's status text in the parent's registry without ending anything
        (the seed's `state.setStatus`). Raises `NotAChild` on a thread without a parent."""
        self.emit(status_event(self.state, self.run_id, status))

    def register_tool(self, tool: RegistrableTool | str) -> None:
        """Offer the model one of the middleware's `registrable_tools` from now on. The
        registration is a `tool.registered` event (so every process, a replay and a
        re-execution see the same tools); registering a registered tool does nothing."""
        name = tool if isinstance(tool, str) else tool.name
        found = self.registrable.get(name)
        if found is None or (not isinstance(tool, str) and found[1] is not tool):
            raise ValueError(
                f"cannot register tool {name!r}: no middleware of blueprint "
                f"{self.blueprint.name!r} lists it in registrable_tools()"
            )
        if name in self.state.registered_tools or any(
            isinstance(e, ToolRegistered) and e.name == name for e in self.emitted
        ):
            return
        owner, implementation = found
        self.emit(
            ToolRegistered(
                run_id=self.run_id or None,
                middleware=owner,
                name=name,
                description=implementation.spec.description,
                parameters=dict(implementation.spec.parameters),
                kind="state" if isinstance(implementation, StateTool) else "external",
            )
        )

    def hold_for_approval(self, calls: list[ToolCall]) -> None:
        """Pause the run on these calls until a person approves, edits or rejects them."""
        self.held_calls.extend(calls)
        self.pause_reason = "hitl"


class Middleware:
    """Subclass and override what you need; every hook defaults to doing nothing."""

    name: str = "middleware"
    tags: tuple[str, ...] = ()

    def wanted_by(self, config: BlueprintConfig) -> bool:
        """Whether a blueprint's config asks for this middleware whatever its tags (the
        hitl middleware for a blueprint listing tools in `hitl.tools`)."""
        return False

    def system_prompt(self, ctx: MiddlewareContext) -> str | None:
        """A part of the system prompt of each model call, or None."""
        return None

    def state_tools(self) -> tuple[StateTool, ...]:
        """Tools over the thread's own state, run by the runtime (`StateTool`)."""
        return ()

    def tools(self) -> tuple[Tool, ...]:
        """External tools this middleware gives its blueprints, run by the tools service."""
        return ()

    def subagent_tools(self) -> tuple[SubagentTool, ...]:
        """Tools whose calls spawn child threads (the built-in subagents middleware's)."""
        return ()

    def registrable_tools(self) -> tuple[RegistrableTool, ...]:
        """Tools this middleware may offer at run time with `ctx.register_tool` (not
        offered until then). Every process finds the implementation here by name."""
        return ()

    def state(self, state: ThreadView) -> Any:
        """This middleware's part of `/state` (JSON-able: dicts, lists, scalars, structs),
        shown under its name in camelCase. A pure function of the thread's folded log: the
        API computes it from the log on each request, never from a process's memory."""
        return None

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        """Shape the request of a model call: edit `plan` (prompts, messages, tools)."""
        return

    async def on_model_result(self, ctx: MiddlewareContext, message: ChatMessage) -> None:
        """React to the model's answer, e.g. `ctx.hold_for_approval` on its calls."""
        return

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        """A tool call is about to run."""
        return

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        """A tool call answered `result`."""
        return

    async def on_tool_error(self, ctx: MiddlewareContext, call: ToolCall, error: str) -> None:
        """A tool call failed with `error`."""
        return

    async def on_resume(self, ctx: MiddlewareContext, reason: str, payload: Any) -> None:
        """A paused run resumes; `reason` is why it paused (`hitl`, `subagent`, ...).
        `payload` is None: the runtime passes none (a person's decision is in the log)."""
        return

    async def on_child_report(self, ctx: MiddlewareContext, child: ChildReport) -> None:
        """A subagent child of this thread reported (completed or failed): change
        `child.report` to change what the parent is given, `ctx.emit` to add events."""
        return


def state_key(name: str) -> str:
    """The `/state` key of a middleware's part: its name in camelCase."""
    head, *rest = name.replace("-", "_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def has_state(middleware: Middleware) -> bool:
    """Whether the middleware contributes a part to `/state` (overrides `state`)."""
    return type(middleware).state is not Middleware.state


def hooks_model_calls(middleware: Middleware) -> tuple[bool, bool]:
    """Whether the middleware overrides `before_model`, and `on_model_result`: only a hook
    that is there runs, and is recorded (`middleware.before_model` / `after_model`)."""
    kind = type(middleware)
    return (
        kind.before_model is not Middleware.before_model,
        kind.on_model_result is not Middleware.on_model_result,
    )


def state_parts(middleware: list[Middleware], state: ThreadView) -> dict[str, Any]:
    """Each contributing middleware's part, keyed by `state_key`. A part that raises or is
    not JSON-able is shown as `{"error": ...}`, so one faulty middleware never hides the
    thread's state."""
    parts: dict[str, Any] = {}
    for m in middleware:
        if not has_state(m):
            continue
        try:
            parts[state_key(m.name)] = msgspec.to_builtins(m.state(state))
        except Exception as e:
            log.warning("middleware state failed", middleware=m.name, error=str(e))
            parts[state_key(m.name)] = {"error": f"{type(e).__name__}: {e}"}
    return parts


class PromptedStateTools(Middleware):
    """A middleware that is a fixed part of the system prompt and the state tools it
    tells the model about."""

    prompt: str = ""
    prompted_tools: tuple[StateTool, ...] = ()

    def system_prompt(self, ctx: MiddlewareContext) -> str | None:
        return self.prompt

    def state_tools(self) -> tuple[StateTool, ...]:
        return self.prompted_tools
