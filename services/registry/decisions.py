"""Pure decisions of the registry: command + the aggregate's history (an agency's: its
folded state, `services/registry/agencies.py`) → new events."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from agency.contracts.commands import (
    Command,
    ConfigurePush,
    CreateAgency,
    CreateTenant,
    CreateThread,
    DeleteBlueprint,
    IssueApiKey,
    RemovePush,
    RemoveTenantProvider,
    RevokeApiKey,
    SaveBlueprint,
    SetAgencyBudget,
    SetAgencyRetention,
    SetTenantBudget,
    SetTenantModelPolicy,
    SetTenantProvider,
    SetTenantRetention,
    SetThreadMetadata,
    SetThreadRetention,
    SubscribeWebhook,
    UnsubscribeWebhook,
)
from agency.contracts.errors import CommandRejected
from agency.contracts.events import (
    AgencyBudgetSet,
    AgencyCreated,
    AgencyRetentionSet,
    AnyEvent,
    ApiKeyIssued,
    ApiKeyRevoked,
    BlueprintDeleted,
    BlueprintSaved,
    PushConfigured,
    PushRemoved,
    TenantBudgetSet,
    TenantCreated,
    TenantModelPolicySet,
    TenantProviderRemoved,
    TenantProviderSet,
    TenantRetentionSet,
    ThreadCreated,
    ThreadMetadataSet,
    ThreadRetentionSet,
    WebhookSubscribed,
    WebhookUnsubscribed,
)
from agency.contracts.ids import is_valid_token
from agency.contracts.limits import has_nul
from agency.domain.key_liveness import live_keys
from agency.infra.jetstream.records import RecordedEvent
from agency.services.decide import applied
from agency.services.registry.agencies import AgencyState

C = TypeVar("C")
Decide = Callable[[C, list[RecordedEvent]], Sequence[AnyEvent]]


def once_per_key(decide: Decide[C]) -> Callable[[C, list[RecordedEvent], str], Sequence[AnyEvent]]:
    """`decide` for a command with an idempotency key: nothing when the history holds what
    that key decided already (a redelivery, or a retried request)."""

    @functools.wraps(decide)
    def decided(command: C, history: list[RecordedEvent], key: str) -> Sequence[AnyEvent]:
        return () if applied(history, key) else decide(command, history)

    return decided


AgencyDecide = Callable[[C, AgencyState, str], Sequence[AnyEvent]]


def once_per_agency_key(decide: AgencyDecide[C]) -> AgencyDecide[C]:
    """`decide` on an agency's kept state: nothing when that state holds the key already."""

    @functools.wraps(decide)
    def decided(command: C, state: AgencyState, key: str) -> Sequence[AnyEvent]:
        return () if key in state.keys else decide(command, state, key)

    return decided


def _existing_agency(agency_id: str, state: AgencyState) -> None:
    if not state.created:
        raise CommandRejected("unknown_agency", f"agency {agency_id} does not exist")


@once_per_agency_key
def configure_push(command: ConfigurePush, state: AgencyState, key: str) -> Sequence[AnyEvent]:
    """A task's push-notification config, new or replacing the one of the same id."""
    _existing_agency(command.agency_id, state)
    return (
        PushConfigured(
            task_id=command.task_id,
            config_id=command.config_id,
            url=command.url,
            sealed_auth=command.sealed_auth,
        ),
    )


@once_per_agency_key
def remove_push(command: RemovePush, state: AgencyState, key: str) -> Sequence[AnyEvent]:
    """Removed, whether it was configured or not (a removal is idempotent, as A2A has it)."""
    _existing_agency(command.agency_id, state)
    return (PushRemoved(task_id=command.task_id, config_id=command.config_id),)


@once_per_key
def create_tenant(command: CreateTenant, history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    if history:
        raise CommandRejected("tenant_exists", "the tenant already exists")
    return (
        TenantCreated(name=command.name),
        ApiKeyIssued(key_id=command.key_id, key_hash=command.key_hash, name="default"),
    )


@once_per_key
def issue_api_key(command: IssueApiKey, history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    if not any(e.type == "tenant.created" for e in history):
        raise CommandRejected("unknown_tenant", "the tenant does not exist")
    if any(e.type == "tenant.deleted" for e in history):
        raise CommandRejected("unknown_tenant", "the tenant was deleted")
    live = live_keys(history)
    if command.key_id in live or any(
        isinstance(e.payload, ApiKeyIssued) and e.payload.key_id == command.key_id for e in history
    ):
        raise CommandRejected("key_exists", f"API key {command.key_id} already exists")
    issued = ApiKeyIssued(key_id=command.key_id, key_hash=command.key_hash, name=command.name)
    if command.replaces is None:
        return (issued,)
    if command.replaces not in live:
        raise CommandRejected("unknown_key", f"no live API key {command.replaces}")
    return (issued, ApiKeyRevoked(key_id=command.replaces))


@once_per_key
def revoke_api_key(command: RevokeApiKey, history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    if command.key_id not in live_keys(history):
        raise CommandRejected("unknown_key", f"no live API key {command.key_id}")
    return (ApiKeyRevoked(key_id=command.key_id),)


def _existing_tenant(history: list[RecordedEvent]) -> None:
    if not any(e.type == "tenant.created" for e in history):
        raise CommandRejected("unknown_tenant", "the tenant does not exist")


TenantChange = SetTenantProvider | RemoveTenantProvider | SetTenantModelPolicy


@once_per_key
def change_tenant(command: TenantChange, history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    """A change of an existing tenant's own settings: the one event that records it."""
    _existing_tenant(history)
    match command:
        case SetTenantProvider(name=name, sealed=sealed):
            return (TenantProviderSet(name=name, sealed=sealed),)
        case RemoveTenantProvider(name=name):
            return (TenantProviderRemoved(name=name),)
        case SetTenantModelPolicy(operator_fallback=fallback):
            return (TenantModelPolicySet(operator_fallback=fallback),)


def _budget_problem(tokens: int | None, usd: float | None) -> None:
    if (tokens is not None and tokens < 0) or (usd is not None and not usd >= 0):
        raise CommandRejected(
            "invalid_budget", "a budget's tokens and usd are 0 (none) or more, or null"
        )


@once_per_key
def set_tenant_budget(command: SetTenantBudget, history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    _existing_tenant(history)
    _budget_problem(command.tokens, command.usd)
    return (TenantBudgetSet(tokens=command.tokens, usd=command.usd),)


def _retention_problem(seconds: float | None) -> None:
    if seconds is not None and not seconds >= 0:
        raise CommandRejected(
            "invalid_retention", "a retention is 0 (no limit of its own) or more seconds, or null"
        )


@once_per_key
def set_tenant_retention(
    command: SetTenantRetention, history: list[RecordedEvent]
) -> Sequence[AnyEvent]:
    _existing_tenant(history)
    _retention_problem(command.seconds)
    return (TenantRetentionSet(seconds=command.seconds),)


@once_per_agency_key
def set_agency_retention(
    command: SetAgencyRetention, state: AgencyState, key: str
) -> Sequence[AnyEvent]:
    _existing_agency(command.agency_id, state)
    _retention_problem(command.seconds)
    return (AgencyRetentionSet(seconds=command.seconds),)


@once_per_agency_key
def set_agency_budget(command: SetAgencyBudget, state: AgencyState, key: str) -> Sequence[AnyEvent]:
    _existing_agency(command.agency_id, state)
    _budget_problem(command.tokens, command.usd)
    return (AgencyBudgetSet(tokens=command.tokens, usd=command.usd),)


@once_per_agency_key
def create_agency(command: CreateAgency, state: AgencyState, key: str) -> Sequence[AnyEvent]:
    if state.created:
        raise CommandRejected("agency_exists", f"agency {command.agency_id} already exists")
    return (AgencyCreated(name=command.name, metadata=command.metadata),)


@once_per_agency_key
def save_blueprint(command: SaveBlueprint, state: AgencyState, key: str) -> Sequence[AnyEvent]:
    _existing_agency(command.agency_id, state)
    if not is_valid_token(command.blueprint.name):
        raise CommandRejected(
            "invalid_blueprint",
            f"blueprint name {command.blueprint.name[:80]!r} must be 1 to 64 letters, digits, "
            "`-` or `_`",
        )
    if has_nul(command.blueprint):
        raise CommandRejected("invalid_blueprint", "the blueprint contains a NUL character")
    for blueprint in command.blueprint.with_inline():
        for server in blueprint.config.mcp_servers:
            # A saved blueprint is a tenant's: it may not start processes on our hosts or
            # read our services' environment (docs/mcp.md), nor may the subagent
            # blueprints it defines inline.
            problem = server.operator_only()
            if problem is not None:
                raise CommandRejected("invalid_blueprint", problem)
        for agent in blueprint.config.remote_agents:
            problem = agent.operator_only()
            if problem is not None:
                raise CommandRejected("invalid_blueprint", problem)
    revision = 1 + state.revisions.get(command.blueprint.name, 0)
    return (BlueprintSaved(blueprint=command.blueprint, revision=revision),)


@once_per_agency_key
def delete_blueprint(command: DeleteBlueprint, state: AgencyState, key: str) -> Sequence[AnyEvent]:
    """A blueprint the agency has saved, and not deleted since, is deleted; else rejected."""
    if command.name not in state.saved:
        raise CommandRejected(
            "unknown_blueprint",
            f"agency {command.agency_id} has no saved blueprint {command.name!r}",
        )
    return (BlueprintDeleted(name=command.name),)


@once_per_agency_key
def subscribe_webhook(
    command: SubscribeWebhook, state: AgencyState, key: str
) -> Sequence[AnyEvent]:
    _existing_agency(command.agency_id, state)
    if command.subscription_id in state.webhooks:
        raise CommandRejected(
            "webhook_exists", f"webhook subscription {command.subscription_id} already exists"
        )
    if not command.kinds:
        raise CommandRejected("invalid_webhook", "a webhook subscribes to one event kind or more")
    return (
        WebhookSubscribed(
            subscription_id=command.subscription_id,
            url=command.url,
            kinds=command.kinds,
            sealed_secret=command.sealed_secret,
            description=command.description,
        ),
    )


@once_per_agency_key
def unsubscribe_webhook(
    command: UnsubscribeWebhook, state: AgencyState, key: str
) -> Sequence[AnyEvent]:
    if command.subscription_id not in state.webhooks:
        raise CommandRejected(
            "unknown_webhook",
            f"agency {command.agency_id} has no webhook subscription {command.subscription_id}",
        )
    return (WebhookUnsubscribed(subscription_id=command.subscription_id),)


@once_per_key
def create_thread(command: CreateThread, history: list[RecordedEvent]) -> Sequence[AnyEvent]:
    if history:
        raise CommandRejected("thread_exists", f"thread {command.thread_id} already exists")
    # The event records the command as given: each of its fields is one of the command's.
    return (msgspec.convert(command, ThreadCreated, from_attributes=True),)


@once_per_key
def set_thread_metadata(
    command: SetThreadMetadata, history: list[RecordedEvent]
) -> Sequence[AnyEvent]:
    if not history or history[0].envelope.agency_id != command.agency_id:
        raise CommandRejected(
            "unknown_thread", f"thread {command.thread_id} is not in agency {command.agency_id}"
        )
    return (ThreadMetadataSet(metadata=command.metadata),)


@once_per_key
def set_thread_retention(
    command: SetThreadRetention, history: list[RecordedEvent]
) -> Sequence[AnyEvent]:
    if not history or history[0].envelope.agency_id != command.agency_id:
        raise CommandRejected(
            "unknown_thread", f"thread {command.thread_id} is not in agency {command.agency_id}"
        )
    _retention_problem(command.seconds)
    return (ThreadRetentionSet(seconds=command.seconds),)


# The pure decision of each command decided on the tenant's own aggregate, and of each on
# an agency's kept state (`agencies.py`), not on its whole history.
TENANT_DECISIONS: dict[
    type[Command], Callable[[Any, list[RecordedEvent], str], Sequence[AnyEvent]]
] = {
    CreateTenant: create_tenant,
    IssueApiKey: issue_api_key,
    RevokeApiKey: revoke_api_key,
    SetTenantProvider: change_tenant,
    RemoveTenantProvider: change_tenant,
    SetTenantModelPolicy: change_tenant,
    SetTenantBudget: set_tenant_budget,
    SetTenantRetention: set_tenant_retention,
}
AgencyCommand = (
    CreateAgency
    | SaveBlueprint
    | DeleteBlueprint
    | SetAgencyBudget
    | SetAgencyRetention
    | SubscribeWebhook
    | UnsubscribeWebhook
    | ConfigurePush
    | RemovePush
)
AGENCY_DECISIONS: dict[type[Command], AgencyDecide[Any]] = {
    CreateAgency: create_agency,
    SaveBlueprint: save_blueprint,
    DeleteBlueprint: delete_blueprint,
    SetAgencyBudget: set_agency_budget,
    SetAgencyRetention: set_agency_retention,
    SubscribeWebhook: subscribe_webhook,
    UnsubscribeWebhook: unsubscribe_webhook,
    ConfigurePush: configure_push,
    RemovePush: remove_push,
}
