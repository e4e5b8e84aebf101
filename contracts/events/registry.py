"""Tenants, agencies and blueprints."""

from __future__ import annotations

from agency.contracts.events.base import Event
from agency.contracts.events.blueprint import BlueprintSpec


class TenantCreated(Event, frozen=True, kw_only=True, tag="tenant.created"):
    name: str


class ApiKeyIssued(Event, frozen=True, kw_only=True, tag="tenant.api_key_issued"):
    """Only a hash of the key is stored; the key itself is shown once, to its creator."""

    key_id: str
    key_hash: str
    name: str = ""


class ApiKeyRevoked(Event, frozen=True, kw_only=True, tag="tenant.api_key_revoked"):
    key_id: str


class TenantProviderSet(Event, frozen=True, kw_only=True, tag="tenant.provider_set"):
    """The tenant's own settings of a model provider: its key and base URL, sealed
    (`infra/sealing.py`), never in clear; the tenant's runs call the provider
    with them instead of the operator's."""

    name: str
    sealed: str


class TenantProviderRemoved(Event, frozen=True, kw_only=True, tag="tenant.provider_removed"):
    name: str


class TenantModelPolicySet(Event, frozen=True, kw_only=True, tag="tenant.model_policy_set"):
    """Set by the operator: whether the tenant's runs may call a provider with the
    operator's settings when the tenant has none of its own for it."""

    operator_fallback: bool


class TenantBudgetSet(Event, frozen=True, kw_only=True, tag="tenant.budget_set"):
    """Set by the operator: the tenant's spend budget per period (`services/tenancy/spend.py`),
    in tokens and in USD. None leaves the operator's default; 0 is no budget."""

    tokens: int | None = None
    usd: float | None = None


class AgencyBudgetSet(Event, frozen=True, kw_only=True, tag="agency.budget_set"):
    """Set by the tenant: one agency's spend budget per period, within the tenant's. None
    leaves the operator's default for agencies; 0 is no budget of its own."""

    tokens: int | None = None
    usd: float | None = None


class TenantRetentionSet(Event, frozen=True, kw_only=True, tag="tenant.retention_set"):
    """How long the tenant's threads are kept after their last activity, in seconds
    (`services/threads/retention.py`), within the operator's maximum. None leaves the
    operator's default; 0 keeps them."""

    seconds: float | None = None


class AgencyRetentionSet(Event, frozen=True, kw_only=True, tag="agency.retention_set"):
    """How long one agency's threads are kept after their last activity, in seconds,
    within the tenant's. None leaves the tenant's; 0 keeps them as long as the tenant's."""

    seconds: float | None = None


class AgencyCreated(Event, frozen=True, kw_only=True, tag="agency.created"):
    name: str
    metadata: dict[str, str] = {}


class BlueprintSaved(Event, frozen=True, kw_only=True, tag="blueprint.saved"):
    """Version 2: `blueprint.config` typed (version 1 held a free dict with camelCase keys;
    see `contracts.upcasters`)."""

    schema_version = 2
    blueprint: BlueprintSpec
    revision: int


class BlueprintDeleted(Event, frozen=True, kw_only=True, tag="blueprint.deleted"):
    name: str


RegistryEvent = (
    TenantCreated
    | ApiKeyIssued
    | ApiKeyRevoked
    | TenantProviderSet
    | TenantProviderRemoved
    | TenantModelPolicySet
    | TenantBudgetSet
    | TenantRetentionSet
    | AgencyCreated
    | AgencyBudgetSet
    | AgencyRetentionSet
    | BlueprintSaved
    | BlueprintDeleted
)
