"""A child's run ended: its outcome recorded on the parent for the call that started that
run, once, with the files it returned copied under `subagents/<child>/`; for a non-blocking
call of a parent that hears its children, the report queued to the parent as a message."""

from __future__ import annotations

import structlog

from agency.contracts.commands import InvokeThread
from agency.contracts.events import (
    AnyEvent,
    ChatMessage,
    FileWritten,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    SubagentCompleted,
)
from agency.contracts.events.subagent import ChildOutcome
from agency.contracts.ids import derived_id
from agency.domain.child_naming import report_message, returned_path
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.decide import decide_and_append
from agency.services.subagents.history import Origin, call_of, files_of, has_report
from agency.services.subagents.reads import read_finding, read_through
from agency.services.subagents.relay import Relay
from agency.services.threads.agent_trees import stopped_by_sweep

log = structlog.get_logger(__name__)


def returned_files(
    history: list[RecordedEvent], run_id: str, named: tuple[str, ...] | None
) -> list[tuple[str, str]]:
    """What a child's run returns to its parent: the files its session's end named (its
    `attachments_property`), else every file the run wrote."""
    if named is None:
        return list(files_of(history, run_id).items())
    files = files_of(history)
    return [(p, files[p]) for p in named if p in files]


class Reports:
    """Records a child's outcome on its parent, once per call."""

    def __init__(self, bus: Bus, relay: Relay) -> None:
        self._bus = bus
        self._relay = relay

    async def report(self, event: RecordedEvent) -> None:
        env = event.envelope
        tenant, child = env.tenant_id, env.aggregate_id
        payload = event.payload
        child_run = payload.run_id if isinstance(payload, RequestRejected) else env.run_id or ""
        parent = await self._relay.parent_of(tenant, child)
        if parent is None:
            return
        outcome: ChildOutcome
        named: tuple[str, ...] | None = None
        match event.payload:
            case RunCompleted(result=result, attachments=named):
                outcome, report = "completed", result
            case RunError(error=error, attachments=named):
                outcome, report = "error", error
            case RunCanceled(reason=reason):
                outcome, report = "canceled", reason
            case RequestRejected(reason=reason):
                # The child refused the run (it was terminated): the call gets the reason.
                outcome, report = "error", reason
            case _:
                return
        history, origin = await read_finding(
            self._bus.store, tenant, parent.thread_id, lambda h: call_of(h, child, child_run)
        )
        if origin is None:
            # A run of the child someone else asked for (a user's own message to it).
            log.info(
                "child's run ended, but no call of its parent started it; not reported",
                child_thread_id=child, parent_thread_id=parent.thread_id, run_id=child_run,
            )  # fmt: skip
            return
        child_history = await read_through(self._bus.store, tenant, child, event)
        returned = {
            returned_path(child, p): c for p, c in returned_files(child_history, child_run, named)
        }
        first = history[0].envelope
        context = EventContext(
            agency_id=first.agency_id,
            thread_id=parent.thread_id,
            correlation_id=first.correlation_id,
        )
        reported = await self.complete(
            tenant, parent.thread_id, origin, child, outcome, report, context,
            key=f"report:{child}:{child_run}", files=returned,
        )  # fmt: skip
        # An explicit child's results are in the registry; it escalates by itself.
        # Nor is a report of a child its tree's stop ended: its parent was stopped with it.
        queued = not origin.blocking and parent.communication != "explicit"
        if reported and queued and not stopped_by_sweep(report):
            text = report_message(child, outcome, report, tuple(returned))
            await self._bus.commands.send(
                tenant,
                InvokeThread(
                    agency_id=env.agency_id or "",
                    thread_id=parent.thread_id,
                    run_id=derived_id("run_", "report", child, child_run),
                    messages=(ChatMessage(role="user", content=text),),
                    reported_by=child,
                ),
                idempotency_key=f"report-invoke:{child}:{child_run}",
            )

    async def complete(
        self,
        tenant: str,
        parent: str,
        origin: Origin,
        child: str,
        outcome: ChildOutcome,
        report: str,
        context: EventContext,
        *,
        key: str,
        files: dict[str, str] | None = None,
    ) -> bool:
        """Record the outcome of the call `origin` on the parent once; False if it was."""
        returned = files or {}
        text = report_message(child, outcome, report, tuple(returned)) if returned else report
        events: tuple[AnyEvent, ...] = (
            *(
                FileWritten(run_id=origin.run_id, path=p, content=c, origin="attachment")
                for p, c in returned.items()
            ),
            SubagentCompleted(
                run_id=origin.run_id,
                tool_call_id=origin.tool_call_id,
                child_thread_id=child,
                outcome=outcome,
                report=text,
                attachments=tuple(returned),
            ),
        )
        result = await decide_and_append(
            self._bus.store, tenant, "thread", parent,
            lambda history: () if has_report(history, origin.tool_call_id) else events,
            context=context,
            idempotency_key=key,
        )  # fmt: skip
        return bool(result.events)
