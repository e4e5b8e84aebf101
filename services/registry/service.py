"""Handles registry commands; the only writer of tenant and agency aggregates."""

from __future__ import annotations

import asyncio

import structlog

from contracts.commands import (
    CommandEnvelope,
    CreateAgency,
    CreateTenant,
    CreateThread,
    SaveBlueprint,
)
from contracts.subjects import Aggregate
from infra.jetstream.commandbus import CommandRejected, CommandWorker, Delivery
from infra.jetstream.connection import Bus
from infra.jetstream.records import EventContext
from services.agents.system import AgentSystem
from services.common.decide import Decision, decide_and_append
from services.registry import decisions

log = structlog.get_logger(__name__)


class RegistryService:
    def __init__(self, bus: Bus, system: AgentSystem) -> None:
        self._bus = bus
        self._system = system

    async def handle(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        tenant = envelope.tenant_id
        key = envelope.idempotency_key
        match envelope.payload:
            case CreateTenant() as create_tenant:
                await self._append(
                    tenant, "tenant", tenant, key, None,
                    lambda h: decisions.create_tenant(create_tenant, h, key),
                )  # fmt: skip
            case CreateAgency() as create_agency:
                await self._append(
                    tenant, "agency", create_agency.agency_id, key, create_agency.agency_id,
                    lambda h: decisions.create_agency(create_agency, h, key),
                )  # fmt: skip
            case SaveBlueprint() as save:
                await self._append(
                    tenant, "agency", save.agency_id, key, save.agency_id,
                    lambda h: decisions.save_blueprint(save, h, key),
                )  # fmt: skip
            case CreateThread() as command:
                await self._create_thread(tenant, command, key)
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
        agency = await self._bus.store.read(tenant, "agency", command.agency_id)
        if not any(e.type == "agency.created" for e in agency):
            raise CommandRejected("unknown_agency", f"agency {command.agency_id} does not exist")
        correlation = command.thread_id
        if command.parent is not None:
            parent = await self._bus.store.read(tenant, "thread", command.parent.thread_id)
            if parent:
                correlation = parent[0].envelope.correlation_id or command.parent.thread_id
        await decide_and_append(
            self._bus.store, tenant, "thread", command.thread_id,
            lambda h: decisions.create_thread(command, h, key),
            context=EventContext(
                agency_id=command.agency_id,
                thread_id=command.thread_id,
                correlation_id=correlation,
                causation_id=command.parent.thread_id if command.parent else None,
            ),
            idempotency_key=key,
        )  # fmt: skip


async def run_registry(
    nats_url: str, database_url: str, stop: asyncio.Event, system: AgentSystem
) -> None:
    async with Bus(nats_url, name="agency-registry") as bus:
        service = RegistryService(bus, system)
        worker = CommandWorker(bus.js, "registry", service.handle, dead_letters=bus.dead_letters)
        await worker.run(stop)
