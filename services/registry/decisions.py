"""Pure decisions of the registry: command + the aggregate's history → new events."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.commands import CreateAgency, CreateTenant, CreateThread, SaveBlueprint
from contracts.events import (
    AgencyCreated,
    AnyEvent,
    ApiKeyIssued,
    BlueprintSaved,
    TenantCreated,
    ThreadCreated,
)
from infra.jetstream.commandbus import CommandRejected
from infra.jetstream.records import RecordedEvent
from services.common.decide import applied


def create_tenant(
    command: CreateTenant, history: list[RecordedEvent], key: str
) -> Sequence[AnyEvent]:
    if applied(history, key):
        return ()
    if history:
        raise CommandRejected("tenant_exists", "the tenant already exists")
    return (
        TenantCreated(name=command.name),
        ApiKeyIssued(key_id=command.key_id, key_hash=command.key_hash),
    )


def create_agency(
    command: CreateAgency, history: list[RecordedEvent], key: str
) -> Sequence[AnyEvent]:
    if applied(history, key):
        return ()
    if any(e.type == "agency.created" for e in history):
        raise CommandRejected("agency_exists", f"agency {command.agency_id} already exists")
    return (AgencyCreated(name=command.name, metadata=command.metadata),)


def save_blueprint(
    command: SaveBlueprint, history: list[RecordedEvent], key: str
) -> Sequence[AnyEvent]:
    if applied(history, key):
        return ()
    if not any(e.type == "agency.created" for e in history):
        raise CommandRejected("unknown_agency", f"agency {command.agency_id} does not exist")
    revision = 1 + sum(
        1
        for e in history
        if isinstance(e.payload, BlueprintSaved)
        and e.payload.blueprint.name == command.blueprint.name
    )
    return (BlueprintSaved(blueprint=command.blueprint, revision=revision),)


def create_thread(
    command: CreateThread, history: list[RecordedEvent], key: str
) -> Sequence[AnyEvent]:
    if applied(history, key):
        return ()
    if history:
        raise CommandRejected("thread_exists", f"thread {command.thread_id} already exists")
    return (
        ThreadCreated(
            agency_id=command.agency_id,
            agent_type=command.agent_type,
            parent=command.parent,
            request=command.request,
        ),
    )
