"""The subagent coordinator.

- `subagent.requested` on a parent: unless its tree refuses the child (a limit, or a stop
  of the tree since its admission: `tree_gate.py`; the call is then reported as refused),
  create the child thread (a registry command), record
  `subagent.spawned` on the parent, start the child with the task as its user message (and
  the parent's attached files copied into its filesystem), and arm the call's timeout (a
  `subagents.deadline` command the broker redelivers until it is due).
- `subagent.messaged`: start another run of a resumable child with the message.
- A child's run ends (`run.completed` / `.error` / `.canceled`): record `subagent.completed`
  on the parent for the call that started that run, once, with the files the run wrote
  copied back under `subagents/<child>/`; the runtime turns it into the call's tool result
  and resumes the parent. For a non-blocking call the report is also queued to the parent
  as a message.
- A child's `session.status`: recorded on the parent as `subagent.status`.
- `subagents.provide_variables` (values posted for a spawn held back by missing scoped
  variables): record them on the parent and ask for the deferred child (`variables.py`).
- A child's `session.status` or `subagent.status_set`: recorded on the parent as
  `subagent.status`.
- A child's `subagent.parent_notified`: its content queued to the parent as a message. A
  child whose parent communication is `explicit` escalates only this way: its results are
  recorded on the parent (`subagent.completed`, for the registry) but never queued.
- A run is canceled: cancel every child still working for it, which cascades down the tree.
- A child refuses a run (`request.rejected`: it was terminated): the call that asked for
  it is reported as an error with the reason.
- A parent's `subagent.terminate_requested`: `runtime.terminate` for the child. A child's
  `thread.terminated`: `subagent.terminated` on its parent, once (its registry entry).
- A child thread is created (`thread.created` with a parent call): if its tree was stopped
  after its admission, terminate it (`AgentTrees.on_created`). Else, if its first run was
  never requested (the coordinator died between creating and invoking it, or the invoke
  was dead-lettered while the thread did not exist yet), finish the spawn. The log, not the
  coordinator's memory, says what is left to do, so no child is lost to a crash.

Everything it creates has a deterministic id and an idempotency key, so a redelivered
event, or the coordinator killed and restarted, creates and reports nothing twice.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import structlog

from agency.contracts.commands import (
    CancelRun,
    CommandEnvelope,
    CreateThread,
    InvokeThread,
    ProvideVariables,
    SubagentDeadline,
)
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected
from agency.contracts.events import (
    AnyEvent,
    ChatMessage,
    ChildStatusSet,
    FileWritten,
    ParentNotified,
    ParentRef,
    RequestAccepted,
    RequestRejected,
    RunCanceled,
    RunCompleted,
    RunError,
    SessionStatusSet,
    SubagentCompleted,
    SubagentMessaged,
    SubagentRequested,
    SubagentSpawned,
    SubagentTerminateRequested,
    ThreadCreated,
    ThreadTerminated,
)
from agency.contracts.events.subagent import ChildOutcome
from agency.contracts.ids import derived_id
from agency.domain.child_naming import (
    child_run_id,
    child_thread_id,
    child_token,
    message_run_id,
    report_message,
    returned_path,
    thread_name,
)
from agency.domain.subagent_variables import provide
from agency.infra.jetstream.commandbus import CommandWorker, Defer, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import SUBAGENT_EVENTS
from agency.infra.jetstream.eventworker import EventWorker
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.infra.sealing import seal, unseal
from agency.services.agents.system import AgentSystem
from agency.services.decide import decide_and_append
from agency.services.subagents.history import (
    Origin,
    call_of,
    files_of,
    has_link,
    has_report,
    spawn_moot,
    with_attachments,
)
from agency.services.subagents.relay import Relay
from agency.services.subagents.spawns import Spawns
from agency.services.subagents.tree_gate import TreeGate
from agency.services.threads.agent_trees import (
    PARENT_CANCELED,
    AgentTrees,
    stopped_by_sweep,
)
from agency.services.threads.caches import BlueprintCache

log = structlog.get_logger(__name__)

# How long a child's `thread.created` waits for its spawn under way here to be over.
SPAWN_WAIT = 30.0


def returned_files(
    history: list[RecordedEvent], run_id: str, named: tuple[str, ...] | None
) -> list[tuple[str, str]]:
    """What a child's run returns to its parent: the files its session's end named (its
    `attachments_property`), else every file the run wrote."""
    if named is None:
        return list(files_of(history, run_id).items())
    files = files_of(history)
    return [(p, files[p]) for p in named if p in files]


class Coordinator:
    def __init__(self, bus: Bus, system: AgentSystem) -> None:
        self._bus = bus
        self._system = system
        self.blueprints = BlueprintCache(bus.store)
        self.relay = Relay(bus)
        self.spawns = Spawns()
        self.gate = TreeGate(AgentTrees(bus.store), self.blueprints, system)

    async def handle(self, event: RecordedEvent) -> None:
        match event.payload:
            case SubagentRequested() as request:
                await self._spawn(event, request)
            case SubagentMessaged() as messaged:
                await self._message(event, messaged)
            case SessionStatusSet(status=status) | ChildStatusSet(status=status):
                await self.relay.status(event, status)
            case ParentNotified(content=content):
                await self.relay.notify(event, content)
            case SubagentTerminateRequested() as asked:
                await self.relay.terminate_child(event, asked)
            case ThreadTerminated(reason=reason):
                await self.relay.terminated(event, reason)
            case ThreadCreated(parent=ParentRef(tool_call_id=str() as call_id) as ref):
                await self._adopt(event, ref.thread_id, call_id)
            case RunCompleted() | RunError() | RunCanceled() | RequestRejected():
                if isinstance(event.payload, RunCanceled):
                    await self._cascade(event)
                await self._report(event)

    def _context(self, event: RecordedEvent) -> EventContext:
        env = event.envelope
        return EventContext(
            agency_id=env.agency_id, thread_id=env.aggregate_id, correlation_id=env.correlation_id
        )

    # --- spawning and messaging ------------------------------------------------------

    async def _spawn(self, event: RecordedEvent, request: SubagentRequested) -> None:
        env = event.envelope
        tenant, parent = env.tenant_id, env.aggregate_id
        agency = env.agency_id or ""
        context = self._context(event)
        child = child_thread_id(tenant, parent, request.tool_call_id)
        history = await self._bus.store.read(tenant, "thread", parent)
        if spawn_moot(history, request, child):
            log.info("subagent request of an ended run ignored", child_thread_id=child)
            return
        dynamic = await self.blueprints.dynamic(tenant, agency)
        if (
            request.blueprint is None
            and request.subagent_type not in dynamic
            and request.subagent_type not in self._system.blueprints
        ):
            await self._complete(
                tenant, parent, Origin(request.run_id, request.tool_call_id, request.blocking),
                child, "error", f"no blueprint named {request.subagent_type!r} in this agency",
                context, key=f"report:{child}:unknown",
            )  # fmt: skip
            return
        refused = await self.gate.refusal(event, request, history, child)
        if refused is not None:
            outcome, why = refused
            log.info("subagent refused by its tree", child_thread_id=child, reason=why)
            await self._complete(
                tenant, parent, Origin(request.run_id, request.tool_call_id, request.blocking),
                child, outcome, why, context, key=f"report:{child}:tree",
            )  # fmt: skip
            return
        token = child_token(tenant, parent, request.tool_call_id)
        self.spawns.begin(child)
        invoked = False
        try:
            invoked = await self._create_and_finish(event, request, child, token)
        finally:
            self.spawns.end(child, invoked=invoked)

    async def _create_and_finish(
        self, event: RecordedEvent, request: SubagentRequested, child: str, token: str
    ) -> bool:
        """Create the child and see its spawn through; whether its first invoke went out."""
        env = event.envelope
        tenant, parent, agency = env.tenant_id, env.aggregate_id, env.agency_id or ""
        await self._bus.commands.send(
            tenant,
            CreateThread(
                agency_id=agency,
                thread_id=child,
                agent_type=request.subagent_type,
                parent=ParentRef(
                    thread_id=parent,
                    token=token,
                    tool_call_id=request.tool_call_id,
                    communication=request.parent_communication,
                ),
                sealed_env=request.sealed_env,
                blueprint=request.blueprint,
            ),
            idempotency_key=f"spawn:{child}",
        )
        return await self._finish_spawn(event, request, child, invoke_key=f"spawn-invoke:{child}")

    async def _adopt(self, created: RecordedEvent, parent: str, call_id: str) -> None:
        """A child thread exists: make sure its first run was asked for."""
        tenant, child = created.envelope.tenant_id, created.envelope.aggregate_id
        if child != child_thread_id(tenant, parent, call_id):
            return  # not a `task` child (a fork's copy, say): not ours to start
        root, agency = created.envelope.correlation_id or parent, created.envelope.agency_id or ""
        if await self.gate.trees.on_created(self._bus.commands, tenant, agency, root, child):
            return  # its tree was stopped while it was being spawned: ended as it appears
        if await self.spawns.invoked(child, SPAWN_WAIT):
            return  # the usual case: its spawn here, under way as it was created, invoked it
        history = await self._bus.store.read(tenant, "thread", parent)
        requested = next(
            (
                e
                for e in history
                if isinstance(e.payload, SubagentRequested) and e.payload.tool_call_id == call_id
            ),
            None,
        )
        if requested is None or not isinstance(requested.payload, SubagentRequested):
            return
        request = requested.payload
        if spawn_moot(history, request, child):
            return
        created_payload = created.payload
        if isinstance(created_payload, ThreadCreated) and "forkedFrom" in created_payload.request:
            return  # a fork's copy of a child: its history came with it
        if await self._has_request(tenant, child):
            return  # invoked (by a spawn in another process of this service, say)
        # A spawn that went no further than the child's creation, or one under way in another
        # process (the runtime then takes one of the two invokes): recovery, not a failure.
        log.info("child created but not invoked; starting it", child_thread_id=child)
        # A key of its own: the first invoke's key may still be in the broker's duplicate
        # window although that command was dead-lettered. The runtime accepts one request
        # per run id, so both arriving start one run.
        await self._finish_spawn(requested, request, child, invoke_key=f"adopt-invoke:{child}")

    async def _finish_spawn(
        self, event: RecordedEvent, request: SubagentRequested, child: str, *, invoke_key: str
    ) -> bool:
        """Link the child to the parent, start its first run, arm its timeout: each step
        idempotent, so running this again after a crash anywhere in it is harmless. True:
        the first invoke went out (or the child had one already)."""
        env = event.envelope
        tenant, parent = env.tenant_id, env.aggregate_id
        agency = env.agency_id or ""
        context = self._context(event)
        token = child_token(tenant, parent, request.tool_call_id)
        spawned = await self._registry_entry(tenant, agency, request, child, token)
        await decide_and_append(
            self._bus.store, tenant, "thread", parent,
            lambda history: () if has_link(history, child) else (spawned,),
            context=context,
            idempotency_key=f"spawned:{child}",
        )  # fmt: skip
        # Started already (by another path of this spawn, or a fork copied its run): no
        # second invoke, whatever key it would carry.
        if not await self._has_request(tenant, child):
            await self._invoke_first_run(tenant, agency, parent, request, child, invoke_key)
        if request.timeout_ms:
            origin = Origin(request.run_id, request.tool_call_id, request.blocking)
            await self._arm_deadline(tenant, context, origin, child, request.timeout_ms)
        log.info("subagent spawned", child_thread_id=child, subagent_type=request.subagent_type)
        return True

    async def _registry_entry(
        self, tenant: str, agency: str, request: SubagentRequested, child: str, token: str
    ) -> SubagentSpawned:
        """The link and the child's entry in the parent's registry: the call's values, the
        subagent entry's configuration, and the child blueprint's description as the title
        when the call gave none."""
        blueprint = request.blueprint
        if blueprint is None:
            dynamic = await self.blueprints.dynamic(tenant, agency)
            blueprint = dynamic.get(request.subagent_type) or self._system.blueprints.get(
                request.subagent_type
            )
        name = request.name or request.subagent_type
        return SubagentSpawned(
            run_id=request.run_id,
            tool_call_id=request.tool_call_id,
            child_thread_id=child,
            token=token,
            subagent_type=request.subagent_type,
            name=name,
            title=request.title or (blueprint.description if blueprint else "") or None,
            description=request.entry_description or request.description,
            resumable=request.resumable,
            blocking=request.blocking,
            thread_name=thread_name(request.subagent_type, request.name),
            spawn_group_id=request.spawn_group_id,
            parent_communication=request.parent_communication,
        )

    async def _invoke_first_run(
        self,
        tenant: str,
        agency: str,
        parent: str,
        request: SubagentRequested,
        child: str,
        invoke_key: str,
    ) -> None:
        files = await self._attached(tenant, parent, request.attachments)
        await self._bus.commands.send(
            tenant,
            InvokeThread(
                agency_id=agency,
                thread_id=child,
                run_id=child_run_id(child),
                messages=(
                    ChatMessage(role="user", content=with_attachments(request.description, files)),
                ),
                files=files,
            ),
            idempotency_key=invoke_key,
        )

    async def _has_request(self, tenant: str, child: str) -> bool:
        history = await self._bus.store.read(tenant, "thread", child)
        return any(isinstance(e.payload, RequestAccepted | RequestRejected) for e in history)

    async def _message(self, event: RecordedEvent, messaged: SubagentMessaged) -> None:
        env = event.envelope
        tenant, parent, child = env.tenant_id, env.aggregate_id, messaged.child_thread_id
        files = await self._attached(tenant, parent, messaged.attachments)
        await self._bus.commands.send(
            tenant,
            InvokeThread(
                agency_id=env.agency_id or "",
                thread_id=child,
                run_id=message_run_id(child, messaged.tool_call_id),
                messages=(
                    ChatMessage(role="user", content=with_attachments(messaged.message, files)),
                ),
                files=files,
            ),
            idempotency_key=f"message:{child}:{messaged.tool_call_id}",
        )

    async def _attached(self, tenant: str, parent: str, paths: tuple[str, ...]) -> dict[str, str]:
        if not paths:
            return {}
        files = files_of(await self._bus.store.read(tenant, "thread", parent))
        # The child gets each file at the same path: its filesystem is its own.
        return {p: files[p] for p in paths if p in files}

    async def _arm_deadline(
        self, tenant: str, context: EventContext, origin: Origin, child: str, timeout_ms: int
    ) -> None:
        """The timeout is a command the broker redelivers until it is due: it survives a
        restart of every coordinator, so a parent never waits past it."""
        deadline = utc_now() + timedelta(milliseconds=timeout_ms)
        await self._bus.commands.send(
            tenant,
            SubagentDeadline(
                agency_id=context.agency_id or "",
                parent_thread_id=context.thread_id or "",
                run_id=origin.run_id,
                tool_call_id=origin.tool_call_id,
                child_thread_id=child,
                deadline=deadline,
                timeout_ms=timeout_ms,
            ),
            idempotency_key=f"deadline:{child}",
        )

    async def handle_command(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        payload = envelope.payload
        if isinstance(payload, ProvideVariables):
            await self._provide(envelope.tenant_id, payload)
            return
        if not isinstance(payload, SubagentDeadline):
            raise CommandRejected("wrong_service", f"{envelope.type} is not a subagents command")
        remaining = (payload.deadline - utc_now()).total_seconds()
        if remaining > 0:
            raise Defer(remaining)
        tenant = envelope.tenant_id
        history = await self._bus.store.read(tenant, "thread", payload.parent_thread_id)
        if not history:
            return
        first = history[0].envelope
        context = EventContext(
            agency_id=first.agency_id,
            thread_id=payload.parent_thread_id,
            correlation_id=first.correlation_id,
        )
        origin = Origin(payload.run_id, payload.tool_call_id, blocking=True)
        child = payload.child_thread_id
        reported = await self._complete(
            tenant, payload.parent_thread_id, origin, child, "timeout",
            f"no answer within {payload.timeout_ms} ms", context,
            key=f"report:{child}:{child_run_id(child)}",
        )  # fmt: skip
        if reported:
            await self._bus.commands.send(
                tenant,
                CancelRun(
                    agency_id=payload.agency_id,
                    thread_id=child,
                    reason="subagent timed out",
                    run_id=child_run_id(child),
                ),
                idempotency_key=f"timeout-cancel:{child}",
            )

    async def _provide(self, tenant: str, command: ProvideVariables) -> None:
        """Values for a held-back spawn: record them and ask for the child (`variables`)."""
        parent = command.parent_thread_id
        history = await self._bus.store.read(tenant, "thread", parent)
        if not history:
            raise CommandRejected("unknown_thread", f"thread {parent} does not exist")
        first = history[0].envelope
        context = EventContext(
            agency_id=first.agency_id, thread_id=parent, correlation_id=first.correlation_id
        )
        await decide_and_append(
            self._bus.store, tenant, "thread", parent,
            lambda events: provide(events, command, seal=seal, unseal=unseal),
            context=context,
            idempotency_key=f"variables:{command.request_id}",
        )  # fmt: skip

    # --- reporting ----------------------------------------------------------------

    async def _report(self, event: RecordedEvent) -> None:
        env = event.envelope
        tenant, child = env.tenant_id, env.aggregate_id
        payload = event.payload
        child_run = payload.run_id if isinstance(payload, RequestRejected) else env.run_id or ""
        parent = await self.relay.parent_of(tenant, child)
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
        history = await self._bus.store.read(tenant, "thread", parent.thread_id)
        origin = call_of(history, child, child_run)
        if origin is None:
            return
        child_history = await self._bus.store.read(tenant, "thread", child)
        returned = {
            returned_path(child, p): c for p, c in returned_files(child_history, child_run, named)
        }
        first = history[0].envelope
        context = EventContext(
            agency_id=first.agency_id,
            thread_id=parent.thread_id,
            correlation_id=first.correlation_id,
        )
        reported = await self._complete(
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

    async def _complete(
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

    # --- cancel cascade -------------------------------------------------------------

    async def _cascade(self, event: RecordedEvent) -> None:
        env = event.envelope
        tenant, thread = env.tenant_id, env.aggregate_id
        history = await self._bus.store.read(tenant, "thread", thread)
        done = {
            e.payload.child_thread_id for e in history if isinstance(e.payload, SubagentCompleted)
        }
        for e in history:
            if isinstance(e.payload, SubagentSpawned) and e.payload.child_thread_id not in done:
                child = e.payload.child_thread_id
                await self._bus.commands.send(
                    tenant,
                    CancelRun(
                        agency_id=env.agency_id or "", thread_id=child, reason=PARENT_CANCELED
                    ),
                    idempotency_key=f"cascade:{child}:{env.event_id}",
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
        await coordinator.blueprints.watch(bus.nc)
        events = EventWorker(bus, SUBAGENT_EVENTS, coordinator.handle, ack_wait=ack_wait)
        deadlines = CommandWorker(
            bus.js, "subagents", coordinator.handle_command, dead_letters=bus.dead_letters
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(events.run(stop))
            tg.create_task(deadlines.run(stop))
