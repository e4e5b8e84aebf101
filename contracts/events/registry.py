"""Tenants, agencies and blueprints."""

from __future__ import annotations

from typing import Any

import msgspec

from contracts.events.base import Event


class TenantCreated(Event, frozen=True, kw_only=True, tag="tenant.created"):
    name: str


class ApiKeyIssued(Event, frozen=True, kw_only=True, tag="tenant.api_key_issued"):
    """Only a hash of the key is stored; the key itself is shown once, to its creator."""

    key_id: str
    key_hash: str


class ApiKeyRevoked(Event, frozen=True, kw_only=True, tag="tenant.api_key_revoked"):
    key_id: str


class AgencyCreated(Event, frozen=True, kw_only=True, tag="agency.created"):
    name: str
    metadata: dict[str, str] = {}


class BlueprintSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An agent definition: prompt, model and the tags that pick tools and middleware.

    `config` holds middleware settings (hitl tool lists, subagent types, budgets); it is
    JSON by nature since middleware added by users defines its own keys.
    """

    name: str
    description: str = ""
    prompt: str = ""
    model: str = ""
    tags: tuple[str, ...] = ()
    config: dict[str, Any] = {}
    type: str = "ai_human"


class BlueprintSaved(Event, frozen=True, kw_only=True, tag="blueprint.saved"):
    blueprint: BlueprintSpec
    revision: int


class BlueprintDeleted(Event, frozen=True, kw_only=True, tag="blueprint.deleted"):
    name: str


RegistryEvent = (
    TenantCreated | ApiKeyIssued | ApiKeyRevoked | AgencyCreated | BlueprintSaved | BlueprintDeleted
)
