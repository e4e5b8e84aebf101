"""The subagent coordinator.

- `subagent.requested` on a parent: create the child thread (a registry command), record
  `subagent.spawned` on the parent, start the child with the task as its user message, and
  arm the call's timeout.
- A child's run ends (`run.completed` / `.error` / `.canceled`): record
  `subagent.completed` on the parent once (the runtime turns it into the call's tool result
  and resumes the parent); for a non-blocking child, also queue the report to the parent as
  a message.
- A run is canceled: cancel every child still working for it, which cascades down the tree.

Everything it creates has a deterministic id and an idempotency key, so a redelivered
event, or the coordinator killed and restarted, creates and reports nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from contracts.commands import CancelRun, CreateThread, InvokeThread
from contracts.events import (
    ChatMessage,
    ParentRef,
    RunCanceled,
    RunCompleted,
    RunError,
    SubagentCompleted,
    SubagentRequested,
    SubagentSpawned,
    ThreadCreated,
)
from contracts.events.subagent import ChildOutcome
from contracts.ids import derived_id
from infra.jetstream.connection import Bus
from infra.jetstream.consumers import SUBAGENT_EVENTS
from infra.jetstream.eventworker import EventWorker
from infra.jetstream.records import EventContext, RecordedEvent
from services.agents.system import AgentSystem
from services.common.decide import decide_and_append
from services.runtime.cache import BlueprintCache
from services.subagents.naming import child_run_id, child_thread_id, child_token, report_message

log = structlog.get_logger(__name__)


class Coordinator:
    def __init__(self, bus: Bus, system: AgentSystem) -> None:
        self._bus = bus
        self._system = system
        self._blueprints = BlueprintCache(bus.store)
        self._parents: dict[tuple[str, str], ParentRef | None] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}

    async def handle(self, event: RecordedEvent) -> None:
        match event.payload:
            case SubagentRequested() as request:
                await self._spawn(event, request)
            case RunCompleted() | RunError() | RunCanceled():
                if isinstance(event.payload, RunCanceled):
                    await self._cascade(event)
                await self._report(event)

    # --- spawning -----------------------------------------------------------------

    async def _spawn(self, event: RecordedEvent, request: SubagentRequested) -> None:
        env = event.envelope
        tenant, parent = env.tenant_id, env.aggregate_id
        agency = env.agency_id or ""
        child = child_thread_id(tenant, parent, request.tool_call_id)
        context = EventContext(
            agency_id=agency, thread_id=parent, correlation_id=env.correlation_id
        )
        dynamic = await self._blueprints.dynamic(tenant, agency)
        if (
            request.subagent_type not in dynamic
            and request.subagent_type not in self._system.blueprints
        ):
            await self._complete(
                tenant, parent, request.run_id, request.tool_call_id, child, "error",
                f"no blueprint named {request.subagent_type!r} in this agency", context,
            )  # fmt: skip
            return
        token = child_token(tenant, parent, request.tool_call_id)
        await self._bus.commands.send(
            tenant,
            CreateThread(
                agency_id=agency,
                thread_id=child,
                agent_type=request.subagent_type,
                parent=ParentRef(thread_id=parent, token=token, tool_call_id=request.tool_call_id),
            ),
            idempotency_key=f"spawn:{child}",
        )
        spawned = SubagentSpawned(
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            child_thread_id=child,
            token=token,
            subagent_type=request.subagent_type,
        )
        await decide_and_append(
            self._bus.store, tenant, "thread", parent,
            lambda history: () if _has_link(history, child) else (spawned,),
            context=context,
            idempotency_key=f"spawned:{child}",
        )  # fmt: skip
        await self._bus.commands.send(
            tenant,
            InvokeThread(
                agency_id=agency,
                thread_id=child,
                run_id=child_run_id(child),
                messages=(ChatMessage(role="user", content=request.description),),
            ),
            idempotency_key=f"spawn-invoke:{child}",
        )
        if request.timeout_ms:
            self._arm_timer(tenant, context, request, child)
        log.info("subagent spawned", child_thread_id=child, subagent_type=request.subagent_type)

    def _arm_timer(
        self, tenant: str, context: EventContext, request: SubagentRequested, child: str
    ) -> None:
        if child in self._timers:
            return
        parent, agency = context.thread_id or "", context.agency_id or ""
        seconds = (request.timeout_ms or 0) / 1000

        async def expire() -> None:
            await asyncio.sleep(seconds)
            reported = await self._complete(
                tenant, parent, request.run_id, request.tool_call_id, child, "timeout",
                f"no answer within {request.timeout_ms} ms", context,
            )  # fmt: skip
            if reported:
                await self._bus.commands.send(
                    tenant,
                    CancelRun(agency_id=agency, thread_id=child, reason="subagent timed out"),
                    idempotency_key=f"timeout-cancel:{child}",
                )

        task = asyncio.create_task(expire(), name=f"subagent-timeout-{child}")
        self._timers[child] = task
        task.add_done_callback(lambda _: self._timers.pop(child, None))

    # --- reporting ----------------------------------------------------------------

    async def _parent_of(self, tenant: str, thread: str) -> ParentRef | None:
        key = (tenant, thread)
        if key not in self._parents:
            history = await self._bus.store.read(tenant, "thread", thread)
            created = next(
                (e.payload for e in history if isinstance(e.payload, ThreadCreated)), None
            )
            self._parents[key] = created.parent if created else None
        return self._parents[key]

    async def _report(self, event: RecordedEvent) -> None:
        env = event.envelope
        tenant, child = env.tenant_id, env.aggregate_id
        parent = await self._parent_of(tenant, child)
        if parent is None or parent.tool_call_id is None:
            return
        outcome: ChildOutcome
        match event.payload:
            case RunCompleted(result=result):
                outcome, report = "completed", result
            case RunError(error=error):
                outcome, report = "error", error
            case RunCanceled(reason=reason):
                outcome, report = "canceled", reason
            case _:
                return
        history = await self._bus.store.read(tenant, "thread", parent.thread_id)
        request = next(
            (
                e.payload
                for e in history
                if isinstance(e.payload, SubagentRequested)
                and e.payload.tool_call_id == parent.tool_call_id
            ),
            None,
        )
        if request is None:
            return
        first = history[0].envelope
        context = EventContext(
            agency_id=first.agency_id,
            thread_id=parent.thread_id,
            correlation_id=first.correlation_id,
        )
        reported = await self._complete(
            tenant, parent.thread_id, request.run_id, parent.tool_call_id, child, outcome, report,
            context,
        )  # fmt: skip
        if reported and not request.blocking:
            await self._bus.commands.send(
                tenant,
                InvokeThread(
                    agency_id=env.agency_id or "",
                    thread_id=parent.thread_id,
                    run_id=derived_id("run_", "report", child),
                    messages=(
                        ChatMessage(role="user", content=report_message(child, outcome, report)),
                    ),
                ),
                idempotency_key=f"report-invoke:{child}",
            )
        timer = self._timers.pop(child, None)
        if timer is not None:
            timer.cancel()

    async def _complete(
        self,
        tenant: str,
        parent: str,
        run_id: str,
        tool_call_id: str,
        child: str,
        outcome: ChildOutcome,
        report: str,
        context: EventContext,
    ) -> bool:
        """Record the child's outcome on the parent once; False when it already was."""
        completed = SubagentCompleted(
            run_id=run_id,
            tool_call_id=tool_call_id,
            child_thread_id=child,
            outcome=outcome,
            report=report,
        )
        result = await decide_and_append(
            self._bus.store, tenant, "thread", parent,
            lambda history: () if _has_report(history, child) else (completed,),
            context=context,
            idempotency_key=f"report:{child}",
        )  # fmt: skip
        return bool(result.events)

    # --- cancel cascade -------------------------------------------------------------

    async def _cascade(self, event: RecordedEvent) -> None:
        env = event.envelope
        tenant, thread = env.tenant_id, env.aggregate_id
        history = await self._bus.store.read(tenant, "thread", thread)
        reported = {
            e.payload.child_thread_id for e in history if isinstance(e.payload, SubagentCompleted)
        }
        for e in history:
            if isinstance(e.payload, SubagentSpawned) and e.payload.child_thread_id not in reported:
                child = e.payload.child_thread_id
                await self._bus.commands.send(
                    tenant,
                    CancelRun(
                        agency_id=env.agency_id or "", thread_id=child, reason="parent canceled"
                    ),
                    idempotency_key=f"cascade:{child}:{event.envelope.event_id}",
                )

    async def close(self) -> None:
        for timer in list(self._timers.values()):
            timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await timer


def _has_link(history: list[RecordedEvent], child: str) -> bool:
    return any(
        isinstance(e.payload, SubagentSpawned) and e.payload.child_thread_id == child
        for e in history
    )


def _has_report(history: list[RecordedEvent], child: str) -> bool:
    return any(
        isinstance(e.payload, SubagentCompleted) and e.payload.child_thread_id == child
        for e in history
    )


async def run_coordinator(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    system: AgentSystem,
    *,
    ack_wait: float = 30.0,
) -> None:
    async with Bus(nats_url, name="agency-subagents") as bus:
        coordinator = Coordinator(bus, system)
        worker = EventWorker(bus, SUBAGENT_EVENTS, coordinator.handle, ack_wait=ack_wait)
        try:
            await worker.run(stop)
        finally:
            await coordinator.close()
