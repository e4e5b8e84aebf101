"""`agency serve workflows`: the workflows controller, its commands and the scheduler.

A service of its own rather than part of the subagent coordinator: a workflow is a group
of peers on a channel, not a tree of children, its load follows the channels' traffic and
the schedules, and a system without workflows runs nothing of it. Any number of copies may
run: they share the durable consumer and the command consumer, and each schedule tick
fires once whoever sees it first (see `scheduler.py`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from agency.contracts.commands import (
    CommandEnvelope,
    CreateThread,
    CreateWorkflow,
    PostChannelMessage,
    RemoveSchedule,
    RetryMember,
    SaveBlueprint,
    SetSchedule,
    StopWorkflow,
)
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected
from agency.contracts.events import (
    AnyEvent,
    BlueprintSaved,
    MemberAdded,
    ScheduleRemoved,
    ScheduleSet,
    WorkflowCreated,
)
from agency.domain import workflow_decisions as decisions
from agency.domain.cron import timezone_problem
from agency.domain.workflow_members import member_blueprint, workflow_request
from agency.domain.workflow_state import fold
from agency.infra.jetstream.commandbus import CommandWorker, Defer, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.eventworker import EventWorker
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.decide import applied, decide_and_append
from agency.services.tenancy.blueprint_checks import save_refusal
from agency.services.tenancy.door_limits import DoorLimits
from agency.services.tenancy.fairness import ScheduleLimits, schedule_problem
from agency.services.workflows.engine.controller import WorkflowController
from agency.services.workflows.engine.histories import WorkflowHistories
from agency.services.workflows.engine.scheduler import Scheduler
from agency.services.workflows.engine.subjects import WORKFLOW_EVENTS

log = structlog.get_logger(__name__)

# How long creating a workflow waits for the registry to have its member threads.
_REGISTRY_WAIT = 10.0


@dataclass(frozen=True, slots=True)
class WorkflowSettings:
    """The controller's bounds, per process (docs/operations.md): `concurrency` handlers at
    once, one per lane (a workflow); up to `held` events waiting their lane's turn; one
    tenant's handlers at most `tenant_running` of them, its waiting events at most
    `tenant_held` (beyond it an event is dead-lettered, `tenant_backlog`). Its commands
    (`workflows-commands`) are bounded alike: `command_concurrency` handlers at once, up
    to `command_held` fetched, one tenant's at most `tenant_commands_running` running and
    `tenant_commands_held` held, the excess dead-lettered with `tenant_backlog`."""

    ack_wait: float = 30.0
    scheduler_interval: float = 1.0
    schedules: bool = True
    concurrency: int = 16
    held: int = 256
    tenant_running: int = 4
    tenant_held: int = 64
    command_concurrency: int = 64
    command_held: int = 256
    tenant_commands_running: int = 16
    tenant_commands_held: int = 64
    schedule_limits: ScheduleLimits = field(default_factory=ScheduleLimits.from_env)


class WorkflowCommands:
    def __init__(
        self,
        bus: Bus,
        controller: WorkflowController,
        limits: ScheduleLimits | None = None,
        store: AggregateStore | None = None,
    ) -> None:
        self._bus = bus
        # The workflows' decisions read through it (`histories.py`); the rest, the bus's.
        self._store = store or bus.store
        self._controller = controller
        self._door = DoorLimits.from_env()
        self._limits = limits or ScheduleLimits.from_env()

    async def handle(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        tenant, key = envelope.tenant_id, envelope.idempotency_key
        try:
            match envelope.payload:
                case CreateWorkflow() as create:
                    await self._create(tenant, create, key)
                case PostChannelMessage() as p:
                    await self._on_workflow(
                        tenant, p.workflow_id, p.agency_id, key,
                        lambda s: decisions.post(
                            s, message_id=p.message_id, sender=p.sender,
                            content=p.content, to=p.to,
                        ),
                    )  # fmt: skip
                case StopWorkflow() as halt:
                    await self._on_workflow(
                        tenant, halt.workflow_id, halt.agency_id, key,
                        lambda state: decisions.stop(state, halt.reason),
                    )  # fmt: skip
                case RetryMember() as r:
                    remaining = (r.not_before - utc_now()).total_seconds()
                    if remaining > 0:
                        raise Defer(remaining)
                    await self._controller.retry(tenant, r)
                case SetSchedule() as schedule:
                    await self._set_schedule(tenant, schedule, key)
                case RemoveSchedule() as r:
                    await decide_and_append(
                        self._bus.store, tenant, "schedule", r.schedule_id,
                        lambda h: [] if not h or applied(h, key) else [ScheduleRemoved()],
                        context=EventContext(agency_id=r.agency_id),
                        idempotency_key=key,
                    )  # fmt: skip
                case other:
                    raise CommandRejected(
                        "wrong_service", f"{type(other).__name__} is not a workflows command"
                    )
        except decisions.WorkflowRejected as e:
            raise CommandRejected("rejected", str(e)) from e

    async def _on_workflow(
        self,
        tenant: str,
        workflow_id: str,
        agency_id: str,
        key: str,
        decide: decisions.Decide,
    ) -> None:
        await decide_and_append(
            self._store, tenant, "workflow", workflow_id,
            lambda h: [] if applied(h, key) else decide(fold(h, workflow_id)),
            context=EventContext(agency_id=agency_id),
            idempotency_key=key,
        )  # fmt: skip

    async def _create(self, tenant: str, command: CreateWorkflow, key: str) -> None:
        """Save each member's blueprint, create its thread, wait until the registry has
        both, then record the workflow and the members it did not have."""
        wf = command.workflow_id
        added: list[MemberAdded] = []
        for spec in command.members:
            blueprint = member_blueprint(command.name, spec.name, spec.blueprint)
            if (refused := save_refusal(blueprint, self._door)) is not None:
                # Refused now, with the reason, not after waiting for a save that never comes.
                raise CommandRejected(refused[0], f"agents.{spec.name}: {refused[1]}")
            thread = decisions.member_thread_id(tenant, wf, spec.name)
            await self._bus.commands.send(
                tenant,
                SaveBlueprint(agency_id=command.agency_id, blueprint=blueprint),
                idempotency_key=f"wf-blueprint:{command.agency_id}:{blueprint.name}",
            )
            await self._bus.commands.send(
                tenant,
                CreateThread(
                    agency_id=command.agency_id,
                    thread_id=thread,
                    agent_type=blueprint.name,
                    request=workflow_request(wf, spec.name),
                ),
                idempotency_key=f"wf-thread:{thread}",
            )
            added.append(
                MemberAdded(
                    member=spec.name,
                    blueprint=spec.blueprint.name,
                    agent_type=blueprint.name,
                    thread_id=thread,
                )
            )
        await self._registry_has(tenant, command.agency_id, added)

        def decide(history: list[RecordedEvent]) -> list[AnyEvent]:
            state = fold(history, wf)
            events: list[AnyEvent] = []
            if state.status == "absent":
                events.append(
                    WorkflowCreated(
                        agency_id=command.agency_id,
                        name=command.name,
                        tag=command.tag,
                        limits=command.limits,
                        source=command.source,
                    )
                )
            events += [m for m in added if m.member not in state.members]
            return events

        await decide_and_append(
            self._store, tenant, "workflow", wf, decide,
            context=EventContext(agency_id=command.agency_id),
            idempotency_key=key,
        )  # fmt: skip

    async def _registry_has(self, tenant: str, agency_id: str, members: list[MemberAdded]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _REGISTRY_WAIT
        while True:
            agency = await self._bus.store.read(tenant, "agency", agency_id)
            if not agency:
                raise CommandRejected("unknown_agency", f"agency {agency_id} does not exist")
            saved = {
                e.payload.blueprint.name for e in agency if isinstance(e.payload, BlueprintSaved)
            }
            missing = [m.member for m in members if m.agent_type not in saved]
            for m in members:
                if m.member not in missing and not await self._bus.store.read(
                    tenant, "thread", m.thread_id
                ):
                    missing.append(m.member)
            if not missing:
                return
            if loop.time() > deadline:
                # Retried by the command worker with backoff.
                raise TimeoutError(f"the registry has not created members {missing} yet")
            await asyncio.sleep(0.05)

    async def _set_schedule(self, tenant: str, command: SetSchedule, key: str) -> None:
        problem = schedule_problem(command.cron, self._limits)
        if problem:
            raise CommandRejected("invalid_cron", problem)
        if problem := timezone_problem(command.options.timezone):
            raise CommandRejected("invalid_timezone", problem)
        event = ScheduleSet(
            agency_id=command.agency_id,
            name=command.name,
            cron=command.cron,
            target=command.target,
            workflow_id=command.workflow_id,
            agent=command.agent,
            message=command.message,
            options=command.options,
        )
        await decide_and_append(
            self._bus.store, tenant, "schedule", command.schedule_id,
            lambda h: [] if applied(h, key) else [event],
            context=EventContext(agency_id=command.agency_id),
            idempotency_key=key,
        )  # fmt: skip


async def run_workflows(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    settings: WorkflowSettings | None = None,
) -> None:
    settings = settings or WorkflowSettings()
    async with Bus(nats_url, name="agency-workflows") as bus:
        histories = WorkflowHistories(bus.store)
        controller = WorkflowController(bus, histories)
        commands = WorkflowCommands(bus, controller, settings.schedule_limits, histories)
        events = EventWorker(
            bus, WORKFLOW_EVENTS, controller.handle,
            ack_wait=settings.ack_wait,
            lane=controller.lane,
            on_dead_letter=controller.dead_lettered,
            concurrency=settings.concurrency,
            held=settings.held,
            tenant_running=settings.tenant_running,
            tenant_held=settings.tenant_held,
        )  # fmt: skip
        worker = CommandWorker(
            bus.js, "workflows", commands.handle,
            layout=bus.layout,
            dead_letters=bus.dead_letters,
            batch=settings.command_concurrency,
            held=settings.command_held,
            tenant_running=settings.tenant_commands_running,
            tenant_held=settings.tenant_commands_held,
        )  # fmt: skip
        async with asyncio.TaskGroup() as tg:
            tg.create_task(events.run(stop))
            tg.create_task(worker.run(stop))
            if settings.schedules:
                scheduler = Scheduler(
                    bus, interval=settings.scheduler_interval, limits=settings.schedule_limits
                )
                tg.create_task(scheduler.run(stop))
