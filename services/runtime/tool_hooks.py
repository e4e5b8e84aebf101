"""Middleware hooks on tool events: each middleware sees a call's start, its result or its
error, and a run's resume, just before they are appended; what a hook emits joins the same
append (`ThreadDriver._tool_hooks`)."""

from __future__ import annotations

from collections.abc import Sequence

from agency.contracts.events import (
    AnyEvent,
    MessageAppended,
    RunResumed,
    ToolError,
    ToolRequested,
    ToolStarted,
)
from agency.domain.thread_state import ThreadState
from agency.services.agents.middleware import Middleware
from agency.services.runtime.failures import hook
from agency.services.runtime.view import StepContext


async def tool_event_hooks(
    state: ThreadState,
    middleware: Sequence[Middleware],
    ctx: StepContext,
    events: Sequence[AnyEvent],
) -> list[AnyEvent]:
    """`events`, then what the hooks emitted on them; `state` holds the run they are of."""
    run = state.active_run
    resume_reason = (run.reason if run is not None else None) or "resume"
    calls = {c.id: c for m in state.messages for c in m.tool_calls}
    failed_now = {e.tool_call_id for e in events if isinstance(e, ToolError)}
    for event in events:
        for each in middleware:
            match event:
                case ToolRequested(call=call):
                    with hook(each, "on_tool_start"):
                        await each.on_tool_start(ctx, call)
                case ToolStarted(tool_call_id=call_id) if call_id in calls:
                    with hook(each, "on_tool_start"):
                        await each.on_tool_start(ctx, calls[call_id])
                case MessageAppended(message=message) if message.role == "tool":
                    answered = calls.get(message.tool_call_id or "")
                    outcome = state.outcome(message.tool_call_id or "")
                    failed = answered is not None and (
                        answered.id in failed_now or (outcome is not None and outcome.error)
                    )
                    if answered is not None and failed:
                        with hook(each, "on_tool_error"):
                            await each.on_tool_error(ctx, answered, message.content)
                    elif answered is not None:
                        with hook(each, "on_tool_result"):
                            await each.on_tool_result(ctx, answered, message.content)
                case RunResumed():
                    with hook(each, "on_resume"):
                        await each.on_resume(ctx, resume_reason, None)
    return [*events, *ctx.emitted]
