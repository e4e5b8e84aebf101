"""Commands of the registry: tenants, keys, settings, agencies, blueprints, threads."""

from __future__ import annotations

from agency.contracts.commands.base import Command
from agency.contracts.events.base import ParentRef
from agency.contracts.events.blueprint import BlueprintSpec
from agency.contracts.events.webhook import PushConfig, WebhookSubscription


class CreateTenant(Command, frozen=True, kw_only=True, tag="registry.create_tenant"):
    name: str
    key_id: str
    key_hash: str


class IssueApiKey(Command, frozen=True, kw_only=True, tag="registry.issue_api_key"):
    """A new key of the tenant; with `replaces`, the old key is revoked in the same append
    (a rotation: there is no moment with neither or, after it, both)."""

    key_id: str
    key_hash: str
    name: str = ""
    replaces: str | None = None


class RevokeApiKey(Command, frozen=True, kw_only=True, tag="registry.revoke_api_key"):
    key_id: str


class SetTenantProvider(Command, frozen=True, kw_only=True, tag="registry.set_tenant_provider"):
    """The tenant's own key and base URL of a provider, sealed by the API."""

    name: str
    sealed: str


class RemoveTenantProvider(
    Command, frozen=True, kw_only=True, tag="registry.remove_tenant_provider"
):
    name: str


class SetTenantModelPolicy(
    Command, frozen=True, kw_only=True, tag="registry.set_tenant_model_policy"
):
    operator_fallback: bool


class SetTenantBudget(Command, frozen=True, kw_only=True, tag="registry.set_tenant_budget"):
    """The operator's: the tenant's spend budget per period (None: the default)."""

    tokens: int | None = None
    usd: float | None = None


class SetTenantRetention(Command, frozen=True, kw_only=True, tag="registry.set_tenant_retention"):
    """How long the tenant's threads are kept after their last activity, in seconds (None:
    the operator's default; 0: kept), within the operator's maximum."""

    seconds: float | None = None


class SetAgencyRetention(Command, frozen=True, kw_only=True, tag="registry.set_agency_retention"):
    """How long one agency's threads are kept after their last activity, in seconds (None:
    the tenant's), within the tenant's."""

    agency_id: str
    seconds: float | None = None


class SetAgencyBudget(Command, frozen=True, kw_only=True, tag="registry.set_agency_budget"):
    """The tenant's: one agency's spend budget per period (None: the default)."""

    agency_id: str
    tokens: int | None = None
    usd: float | None = None


class CreateAgency(Command, frozen=True, kw_only=True, tag="registry.create_agency"):
    agency_id: str
    name: str
    metadata: dict[str, str] = {}


class SaveBlueprint(Command, frozen=True, kw_only=True, tag="registry.save_blueprint"):
    agency_id: str
    blueprint: BlueprintSpec


class DeleteBlueprint(Command, frozen=True, kw_only=True, tag="registry.delete_blueprint"):
    """Delete the agency's own blueprint `name` (a static one of that name comes back)."""

    agency_id: str
    name: str


class SubscribeWebhook(
    Command, WebhookSubscription, frozen=True, kw_only=True, tag="registry.subscribe_webhook"
):
    """Subscribe `url` to the agency's events of `kinds`; the secret is sealed by the API."""

    agency_id: str


class UnsubscribeWebhook(Command, frozen=True, kw_only=True, tag="registry.unsubscribe_webhook"):
    agency_id: str
    subscription_id: str


class ConfigurePush(Command, PushConfig, frozen=True, kw_only=True, tag="registry.configure_push"):
    """Configure (or replace) an A2A push notification of a task of the agency; what
    authenticates its POSTs is sealed by the API."""

    agency_id: str


class RemovePush(Command, frozen=True, kw_only=True, tag="registry.remove_push"):
    agency_id: str
    task_id: str
    config_id: str


class CreateThread(Command, frozen=True, kw_only=True, tag="registry.create_thread"):
    agency_id: str
    thread_id: str
    agent_type: str
    parent: ParentRef | None = None
    request: dict[str, str] = {}
    # The child's scoped variables, sealed (`SubagentRequested.sealed_env`).
    sealed_env: str = ""
    # The child's inline blueprint (`SubagentRequested.blueprint`).
    blueprint: BlueprintSpec | None = None


class SetThreadRetention(Command, frozen=True, kw_only=True, tag="registry.set_thread_retention"):
    """How long the thread is kept after its last activity, in seconds (None: its
    agency's), within its agency's (`thread.retention_set`; LangGraph's `ttl`)."""

    agency_id: str
    thread_id: str
    seconds: float | None = None


class SetThreadMetadata(Command, frozen=True, kw_only=True, tag="registry.set_thread_metadata"):
    """Set keys of the thread's metadata (`thread.metadata_set`)."""

    agency_id: str
    thread_id: str
    metadata: dict[str, str]


class ForkThread(Command, frozen=True, kw_only=True, tag="registry.fork_thread"):
    """Fork `thread_id` at its event `at_seq` into the new thread `fork_thread_id` (chosen
    by the sender, so a redelivery finishes the same fork); `agent_type` switches its
    blueprint. Children of the thread running at the cut are forked along."""

    agency_id: str
    thread_id: str
    at_seq: int
    fork_thread_id: str
    agent_type: str | None = None
