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

from agency.contracts.commands import CancelRun, CommandEnvelope, ProvideVariables, SubagentDeadline
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected
from agency.contracts.events import (
    ChildStatusSet,
    ParentNotified,
    ParentRef,
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
from agency.domain.child_naming import child_run_id
from agency.domain.subagent_variables import provide
from agency.infra.jetstream.commandbus import CommandWorker, Defer, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import SUBAGENT_EVENTS
from agency.infra.jetstream.eventworker import EventWorker
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.infra.sealing import seal, unseal
from agency.services.agents.system import AgentSystem
from agency.services.decide import decide_and_append
from agency.services.subagents.history import Origin
from agency.services.subagents.relay import Relay
from agency.services.subagents.reports import Reports
from agency.services.subagents.spawner import Spawner
from agency.services.subagents.spawns import Spawns
from agency.services.subagents.tree_gate import TreeGate
from agency.services.threads.agent_trees import PARENT_CANCELED, AgentTrees
from agency.services.threads.caches import BlueprintCache


class Coordinator:
    """Routes the subagents service's events and commands: spawning and messaging to the
    `Spawner`, a child's end to `Reports`, its status, notices and termination to the
    `Relay`; a call's timeout, variables provided for a held-back spawn and a run's cancel
    cascade are its own."""

    def __init__(self, bus: Bus, system: AgentSystem) -> None:
        self._bus = bus
        self.blueprints = BlueprintCache(bus.store)
        self.relay = Relay(bus)
        self.reports = Reports(bus, self.relay)
        self.spawner = Spawner(
            bus,
            system,
            blueprints=self.blueprints,
            gate=TreeGate(AgentTrees(bus.store), self.blueprints, system),
            spawns=Spawns(),
            reports=self.reports,
        )

    async def handle(self, event: RecordedEvent) -> None:
        match event.payload:
            case SubagentRequested() as request:
                await self.spawner.spawn(event, request)
            case SubagentMessaged() as messaged:
                await self.spawner.message(event, messaged)
            case SessionStatusSet(status=status) | ChildStatusSet(status=status):
                await self.relay.status(event, status)
            case ParentNotified(content=content):
                await self.relay.notify(event, content)
            case SubagentTerminateRequested() as asked:
                await self.relay.terminate_child(event, asked)
            case ThreadTerminated(reason=reason):
                await self.relay.terminated(event, reason)
            case ThreadCreated(parent=ParentRef(tool_call_id=str() as call_id) as ref):
                await self.spawner.adopt(event, ref.thread_id, call_id)
            case RunCompleted() | RunError() | RunCanceled() | RequestRejected():
                if isinstance(event.payload, RunCanceled):
                    await self._cascade(event)
                await self.reports.report(event)

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
        reported = await self.reports.complete(
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
            bus.js,
            "subagents",
            coordinator.handle_command,
            layout=bus.layout,
            dead_letters=bus.dead_letters,
        )
        async with asyncio.TaskGroup() as tg:
            tg.create_task(events.run(stop))
            tg.create_task(deadlines.run(stop))
