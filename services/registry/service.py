"""Handles registry commands; the only writer of tenant and agency aggregates."""

from __future__ import annotations

import asyncio

import nats.js.errors
import structlog

from agency.contracts.commands import (
    CommandEnvelope,
    ConfigurePush,
    CreateThread,
    ForkThread,
    SaveBlueprint,
    SetAgencyRetention,
    SetTenantRetention,
    SetThreadMetadata,
    SetThreadRetention,
    SubscribeWebhook,
)
from agency.contracts.errors import CommandRejected
from agency.contracts.ids import is_valid_token
from agency.contracts.subjects import EVENT_TYPE_HEADER, Aggregate
from agency.infra.jetstream.commandbus import CommandWorker, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import InvalidEvent
from agency.infra.jetstream.records import EventContext
from agency.services.agents.system import AgentSystem
from agency.services.decide import Decision, decide_and_append
from agency.services.registry import decisions
from agency.services.registry.agencies import Agencies
from agency.services.tenancy.blueprint_checks import save_refusal
from agency.services.tenancy.door_limits import DoorLimits
from agency.services.tenancy.held_shares import COMMANDS_HELD, HeldShares
from agency.services.threads.fork import ForkError, fork_thread
from agency.services.threads.retention_policy import (
    RetentionSettings,
    refusal,
    tenant_refusal,
)
from agency.services.webhook_signing import url_problem

log = structlog.get_logger(__name__)


class RegistryService:
    def __init__(self, bus: Bus, system: AgentSystem) -> None:
        self._bus = bus
        self._system = system
        self._agencies = Agencies(bus.store)
        self._door = DoorLimits.from_env()
        self._retention = RetentionSettings.from_env()

    async def handle(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        """Decide and append; a command whose events would break their contract is
        rejected (dead-lettered with the reason), never retried."""
        try:
            await self._handle(envelope)
        except InvalidEvent as e:
            raise CommandRejected("invalid_event", str(e)) from e

    async def _handle(self, envelope: CommandEnvelope) -> None:
        tenant = envelope.tenant_id
        key = envelope.idempotency_key
        command = envelope.payload
        self._refuse_beyond_operator(command)
        if (decide := decisions.TENANT_DECISIONS.get(type(command))) is not None:
            await self._append(
                tenant, "tenant", tenant, key, None, lambda h: decide(command, h, key)
            )
            return
        if isinstance(command, decisions.AgencyCommand):
            # However a save arrives (HTTP, the tenant's own NATS subjects, a workflow):
            # no stdio server, no address a tenant may not reach, no oversized prompt.
            if (
                isinstance(command, SaveBlueprint)
                and (refused := save_refusal(command.blueprint, self._door)) is not None
            ):
                raise CommandRejected(*refused)
            if (
                isinstance(command, SubscribeWebhook | ConfigurePush)
                and (problem := url_problem(command.url)) is not None
            ):
                raise CommandRejected("invalid_webhook", f"webhook URL refused: {problem}")
            decide_agency = decisions.AGENCY_DECISIONS[type(command)]
            await self._agencies.decide_and_append(
                tenant, command.agency_id,
                lambda state: decide_agency(command, state, key),
                idempotency_key=key,
            )  # fmt: skip
            return
        match command:
            case CreateThread() as command:
                await self._create_thread(tenant, command, key)
            case SetThreadMetadata() as command:
                await self._set_thread_metadata(tenant, command, key)
            case SetThreadRetention() as command:
                await self._set_thread_retention(tenant, command, key)
            case ForkThread() as fork:
                await self._fork(tenant, fork)
            case other:
                raise CommandRejected(
                    "wrong_service", f"{type(other).__name__} is not a registry command"
                )

    async def _append(
        self,
        tenant: str,
        aggregate: Aggregate,
        aggregate_id: str,
        key: str,
        agency_id: str | None,
        decide: Decision,
    ) -> None:
        await decide_and_append(
            self._bus.store,
            tenant,
            aggregate,
            aggregate_id,
            decide,
            context=EventContext(agency_id=agency_id),
            idempotency_key=key,
        )

    async def _create_thread(self, tenant: str, command: CreateThread, key: str) -> None:
        # An agency's first event is its creation: read alone, not with every blueprint.
        created = await self._bus.store.first(tenant, "agency", command.agency_id)
        if created is None or created.type != "agency.created":
            raise CommandRejected("unknown_agency", f"agency {command.agency_id} does not exist")
        if await self._agency_deleted(tenant, command.agency_id):
            raise CommandRejected("unknown_agency", f"agency {command.agency_id} was deleted")
        correlation = command.thread_id
        if command.parent is not None:
            parent = await self._bus.store.read(tenant, "thread", command.parent.thread_id)
            if parent:
                correlation = parent[0].envelope.correlation_id or command.parent.thread_id
        await self._append_to_thread(
            tenant, command, key, lambda h: decisions.create_thread(command, h, key),
            correlation, causation=command.parent.thread_id if command.parent else None,
        )  # fmt: skip

    async def _agency_deleted(self, tenant: str, agency_id: str) -> bool:
        """`agency.deleted` is an agency's last event (`services/threads/scope_erasure.py`):
        one direct get of it."""
        store = self._bus.store
        subject = store.subject(tenant, "agency", agency_id)
        try:
            msg = await self._bus.js.get_last_msg(store.stream_of(agency_id), subject, direct=True)
        except nats.js.errors.NotFoundError:
            return False
        return (msg.headers or {}).get(EVENT_TYPE_HEADER) == "agency.deleted"

    async def _set_thread_metadata(self, tenant: str, command: SetThreadMetadata, key: str) -> None:
        await self._update_thread(
            tenant, command, key, lambda h: decisions.set_thread_metadata(command, h, key)
        )

    async def _set_thread_retention(
        self, tenant: str, command: SetThreadRetention, key: str
    ) -> None:
        await self._update_thread(
            tenant, command, key, lambda h: decisions.set_thread_retention(command, h, key)
        )

    async def _update_thread(
        self,
        tenant: str,
        command: SetThreadMetadata | SetThreadRetention,
        key: str,
        decide: Decision,
    ) -> None:
        """A decision on a thread appended in its conversation (its first event's)."""
        first = await self._bus.store.first(tenant, "thread", command.thread_id)
        correlation = (first.envelope.correlation_id if first else None) or command.thread_id
        await self._append_to_thread(tenant, command, key, decide, correlation)

    def _refuse_beyond_operator(self, command: object) -> None:
        """However a retention arrives (HTTP, the tenant's own NATS subjects): within the
        operator's maximum (`AGENCY_RETENTION_MAX_DAYS`)."""
        match command:
            case SetTenantRetention(seconds=seconds):
                problem = tenant_refusal(seconds, self._retention)
            case SetAgencyRetention(seconds=seconds) | SetThreadRetention(seconds=seconds):
                problem = refusal(seconds, self._retention.max_seconds, "the operator's maximum")
            case _:
                return
        if problem is not None:
            raise CommandRejected("invalid_retention", problem)

    async def _append_to_thread(
        self,
        tenant: str,
        command: CreateThread | SetThreadMetadata | SetThreadRetention,
        key: str,
        decide: Decision,
        correlation: str,
        causation: str | None = None,
    ) -> None:
        context = EventContext(
            agency_id=command.agency_id,
            thread_id=command.thread_id,
            correlation_id=correlation,
            causation_id=causation,
        )
        await decide_and_append(
            self._bus.store, tenant, "thread", command.thread_id, decide,
            context=context, idempotency_key=key,
        )  # fmt: skip

    async def _fork(self, tenant: str, command: ForkThread) -> None:
        """Fork through `services.threads.fork`; a redelivery finishes the same fork (its id
        is the command's), and a fork that cannot be made is rejected with the reason."""
        if not is_valid_token(command.fork_thread_id):
            raise CommandRejected(
                "invalid_id", f"fork thread id {command.fork_thread_id[:80]!r} is no valid id"
            )
        source = await self._bus.store.read(tenant, "thread", command.thread_id)
        if not source or source[0].envelope.agency_id != command.agency_id:
            raise CommandRejected(
                "unknown_thread",
                f"thread {command.thread_id} is not in agency {command.agency_id}",
            )
        known = None
        if command.agent_type is not None:
            state = await self._agencies.current(tenant, command.agency_id)
            known = set(self._system.blueprints) | state.saved
        try:
            await fork_thread(
                self._bus, tenant, command.thread_id, command.at_seq,
                agent_type=command.agent_type, known_agent_types=known,
                fork_id=command.fork_thread_id,
            )  # fmt: skip
        except ForkError as e:
            raise CommandRejected("fork_refused", str(e)) from e


async def run_registry(
    nats_url: str, database_url: str, stop: asyncio.Event, system: AgentSystem
) -> None:
    async with Bus(nats_url, name="agency-registry") as bus:
        service = RegistryService(bus, system)
        worker = CommandWorker(
            bus.js, "registry", service.handle, layout=bus.layout,
            dead_letters=bus.dead_letters,
            held=COMMANDS_HELD, shares=HeldShares.from_env(),
        )  # fmt: skip
        await worker.run(stop)
