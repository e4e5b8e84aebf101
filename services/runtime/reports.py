"""Children's reports as the parent is given them, through `on_child_report` hooks.

A blocking child's report becomes its call's tool message; a non-blocking child's is a
queued request (`request.accepted.reported_by`) whose messages join or start a run. Just
before either is appended, each middleware's `on_child_report` may change the text and
emit events, which join the same append: the hook runs once per report that is given.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from agency.contracts.events import AnyEvent, MessageAppended, RequestInjected, RunStarted
from agency.domain.thread_state import ThreadState
from agency.services.agents.middleware import ChildReport, Middleware, MiddlewareContext
from agency.services.runtime.failures import hook


async def child_report_hooks(
    state: ThreadState,
    middleware: Sequence[Middleware],
    ctx: MiddlewareContext,
    events: Sequence[AnyEvent],
) -> list[AnyEvent]:
    """`events` with every report message passed through the hooks, then what they emit."""
    if not middleware:
        return list(events)
    out: list[AnyEvent] = []
    reporter: str | None = None  # the child whose queued report the next messages are
    for event in events:
        match event:
            case RunStarted(run_id=run_id) | RequestInjected(request_run_id=run_id):
                request = state.queued(run_id)
                reporter = request.reported_by if request is not None else None
            case MessageAppended(message=message, run_id=run_id) if (
                message.role == "tool" and message.tool_call_id
            ):
                report = state.report_for_call(message.tool_call_id)
                if report is not None:
                    entry = state.child(report.child_thread_id)
                    child = ChildReport(
                        thread_id=report.child_thread_id,
                        token=entry.token if entry else "",
                        tool_call_id=report.tool_call_id,
                        outcome=report.outcome,
                        report=message.content,
                        blocking=True,
                    )
                    event = await _given(middleware, ctx, run_id, child, event)
            case MessageAppended(message=message, run_id=run_id) if (
                reporter is not None and message.role == "user"
            ):
                report = state.last_report_of(reporter)
                entry = state.child(reporter)
                child = ChildReport(
                    thread_id=reporter,
                    token=entry.token if entry else "",
                    tool_call_id=report.tool_call_id if report else "",
                    outcome=report.outcome if report else "completed",
                    report=message.content,
                    blocking=False,
                )
                event = await _given(middleware, ctx, run_id, child, event)
        out.append(event)
    out.extend(ctx.emitted)
    ctx.emitted.clear()
    return out


async def _given(
    middleware: Sequence[Middleware],
    ctx: MiddlewareContext,
    run_id: str | None,
    child: ChildReport,
    event: MessageAppended,
) -> MessageAppended:
    if run_id:
        ctx.run_id = run_id
    for m in middleware:
        with hook(m, "on_child_report"):
            await m.on_child_report(ctx, child)
    if child.report == event.message.content:
        return event
    message = msgspec.structs.replace(event.message, content=child.report)
    return msgspec.structs.replace(event, message=message)
