"""A tenant's own model provider settings: the key and base URL it brought for a
provider (sealed in its log with the tenant's key, `tenant.provider_set`;
`infra/keystore/tenant_sealed.py`), and whether the operator lets its
runs fall back to the operator's settings (`tenant.model_policy_set`, on by default).

`tenant_models` folds them from the tenant's events (sealed: the API needs only the
names); `StoreTenantModels` keeps them per tenant for the runtime, reading only the
tenant's new events, at most once per `refresh` seconds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agency.contracts.events import (
    Event,
    TenantModelPolicySet,
    TenantProviderRemoved,
    TenantProviderSet,
)
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import Position
from agency.infra.keystore.tenant_sealed import open_for_tenant, seal_for_tenant
from agency.infra.sealing import UnsealError
from agency.services.llm.catalog import ProviderCatalog
from agency.services.llm.errors import ModelConfigError, ModelRequestError
from agency.services.url_form import url_form_problem

# Seconds a tenant's settings are used before its log is looked at again.
REFRESH_SECONDS = 1.0
MAX_BASE_URL = 2048


@dataclass(frozen=True, slots=True)
class OwnProvider:
    """What a tenant set for a provider, opened: its key and base URL ("": the
    operator's / the preset's)."""

    api_key: str = field(default="", repr=False)
    base_url: str = ""


@dataclass(frozen=True, slots=True)
class TenantModels:
    """The tenant's provider name → sealed settings, and whether the operator's settings
    may serve the tenant's runs for providers it has none of its own for."""

    tenant: str
    sealed: Mapping[str, str] = field(default_factory=dict)
    operator_fallback: bool = True

    def own(self, provider: str) -> OwnProvider | None:
        """The tenant's settings of `provider`, opened; None when it has none. Settings
        this process cannot open (its key destroyed with the tenant, no key store here, or,
        sealed by an older version, another `AGENCY_VARIABLES_KEY`) raise
        `ModelConfigError`."""
        token = self.sealed.get(provider)
        if token is None:
            return None
        try:
            values = open_for_tenant(self.tenant, _context(provider), token)
        except UnsealError as e:
            raise ModelConfigError(
                f"the tenant's own settings of model provider {provider!r} cannot be opened "
                f"here: {e}"
            ) from None
        return OwnProvider(api_key=values.get("api_key", ""), base_url=values.get("base_url", ""))


def tenant_models(
    tenant: str, events: Iterable[Event], start: TenantModels | None = None
) -> TenantModels:
    sealed = dict(start.sealed) if start else {}
    fallback = start.operator_fallback if start else True
    for event in events:
        match event:
            case TenantProviderSet(name=name, sealed=token):
                sealed[name] = token
            case TenantProviderRemoved(name=name):
                sealed.pop(name, None)
            case TenantModelPolicySet(operator_fallback=allowed):
                fallback = allowed
    return TenantModels(tenant=tenant, sealed=sealed, operator_fallback=fallback)


def _context(provider: str) -> str:
    return f"provider|{provider}"


async def seal_own(tenant: str, provider: str, api_key: str, base_url: str) -> str:
    """The tenant's settings of `provider`, sealed with the tenant's key."""
    values = {"api_key": api_key, "base_url": base_url}
    return await seal_for_tenant(tenant, _context(provider), values)


def base_url_form_problem(base_url: str) -> str | None:
    """What is wrong with a tenant's base URL as written: it must be `https://host[...]`
    (the runtime would otherwise be a tenant's way into the operator's network); the
    address it names meets the egress rule too (`services/api/egress_door.py`)."""
    return url_form_problem(base_url, ("https",), MAX_BASE_URL)


class TenantModelSource(Protocol):
    async def models(self, tenant: str) -> TenantModels: ...


@dataclass(slots=True)
class _Entry:
    models: TenantModels
    position: Position
    checked: float


class StoreTenantModels:
    """`TenantModelSource` over the event store: each tenant's settings kept with the
    position they were read to, refreshed from there at most every `refresh` seconds."""

    def __init__(self, store: EventStore, refresh: float = REFRESH_SECONDS) -> None:
        self._store = store
        self._refresh = refresh
        self._kept: dict[str, _Entry] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def models(self, tenant: str) -> TenantModels:
        entry = self._kept.get(tenant)
        if entry is not None and time.monotonic() - entry.checked < self._refresh:
            return entry.models
        async with self._locks.setdefault(tenant, asyncio.Lock()):
            entry = self._kept.get(tenant)
            if entry is not None and time.monotonic() - entry.checked < self._refresh:
                return entry.models
            after = entry.position if entry else None
            events, position = await self._store.read_positioned(
                tenant, "tenant", tenant, after=after
            )
            start = entry.models if entry else None
            models = tenant_models(tenant, (e.payload for e in events), start)
            self._kept[tenant] = _Entry(models, position, time.monotonic())
            return models


def tenant_model_problem(catalog: ProviderCatalog, models: TenantModels, model: str) -> str | None:
    """Why a blueprint's `model` cannot run for this tenant, or None: its provider must be
    known, and either the tenant's own or, where the operator's settings serve it, the
    operator's."""
    if not model:
        return None
    try:
        provider, _ = catalog.split(model)
    except ModelRequestError as e:
        return str(e)
    if provider in models.sealed:
        return None
    if not models.operator_fallback:
        return no_fallback(provider, model)
    return catalog.problem(model)


def no_fallback(provider: str, model: str) -> str:
    return (
        f"model provider {provider!r} (model {model!r}) has no settings of this tenant's own "
        f"(PUT /providers/{provider}) and the operator's are not offered to it"
    )
