"""Tenants' own model provider settings: `PUT /providers/{name}` (the caller's tenant) or
`/tenants/{tenantId}/providers/{name}` (admin) takes a key and, optionally, a base URL
(https only); they are sealed (`infra/sealing.py`) into the tenant's log and
serve its runs instead of the operator's settings of that provider. Neither is ever
answered back: a read says only whether each is set. `DELETE` removes them; the admin's
`PUT /tenants/{tenantId}/model-policy {"operatorFallback": false}` keeps the tenant's
runs off the operator's settings (a provider it has no settings of its own for is then
refused, on save of a blueprint and in a run)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from litestar import Response, delete, get, put
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import JSONBody

from agency.contracts.commands import RemoveTenantProvider, SetTenantModelPolicy, SetTenantProvider
from agency.contracts.events.blueprint_fields import HTTPS_URL_OR_NONE
from agency.contracts.http import Out
from agency.domain.tenant_life import is_live_tenant
from agency.services.api.auth import ADMIN_OPT, Caller, Deps, path_id, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.egress_door import refuse_unreachable
from agency.services.api.path_params import ProviderName, TenantId
from agency.services.api.readback import send_and_read
from agency.services.api.routes_commands import Body
from agency.services.llm.tenant_models import (
    MAX_BASE_URL,
    TenantModels,
    base_url_form_problem,
    seal_own,
    tenant_models,
)


class ProviderBody(Body, frozen=True, kw_only=True):
    """`apiKey`: the tenant's key of the provider; `baseUrl`: its endpoint (https), when
    not the operator's."""

    api_key: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    base_url: Annotated[
        str, msgspec.Meta(max_length=MAX_BASE_URL, extra_json_schema={"pattern": HTTPS_URL_OR_NONE})
    ] = ""

    # One of the two, not empty (`_set` says so otherwise).
    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"required": ["apiKey"], "properties": {"apiKey": {"minLength": 1}}},
            {"required": ["baseUrl"], "properties": {"baseUrl": {"minLength": 1}}},
        ]
    }


class ProviderOut(Out, frozen=True, kw_only=True):
    name: str
    has_key: bool
    base_url_set: bool


class ProvidersOut(Out, frozen=True, kw_only=True):
    """The tenant's own provider settings (whether each part is set, never its value),
    and whether the operator's settings serve the providers it has none of its own for."""

    providers: list[ProviderOut]
    operator_fallback: bool


class ModelPolicyBody(Body, frozen=True, kw_only=True):
    operator_fallback: bool


async def _models(deps: ApiDeps, tenant: str) -> TenantModels:
    """The tenant's settings from its log; 404 when there is no such tenant."""
    history = await deps.bus.store.read(tenant, "tenant", tenant)
    if not is_live_tenant(history):
        raise NotFoundException(f"tenant {tenant} not found")
    return tenant_models(tenant, (e.payload for e in history))


def _out(models: TenantModels) -> ProvidersOut:
    listed = []
    for name in sorted(models.sealed):
        own = models.own(name)
        assert own is not None
        listed.append(
            ProviderOut(name=name, has_key=bool(own.api_key), base_url_set=bool(own.base_url))
        )
    return ProvidersOut(providers=listed, operator_fallback=models.operator_fallback)


def _known(deps: ApiDeps, name: str) -> str:
    if name not in deps.models.known:
        known = ", ".join(sorted(deps.models.known))
        raise NotFoundException(f"no model provider {name!r}: the known ones are {known}")
    return name


async def _set(deps: ApiDeps, tenant: str, name: str, data: ProviderBody) -> Response[ProviderOut]:
    name = _known(deps, name)
    await _models(deps, tenant)
    if not data.api_key and not data.base_url:
        raise ValidationException("field 'apiKey': give the key, a baseUrl, or both")
    if data.base_url:
        if (problem := base_url_form_problem(data.base_url)) is not None:
            raise ValidationException(f"field 'baseUrl': {problem}")
        refuse_unreachable("baseUrl", data.base_url)
    sealed = await seal_own(tenant, name, data.api_key, data.base_url)
    command = SetTenantProvider(name=name, sealed=sealed)
    written = await send_and_read(deps, tenant, "tenant", tenant, command)
    body = ProviderOut(name=name, has_key=bool(data.api_key), base_url_set=bool(data.base_url))
    return Response(body, status_code=200 if written.event is not None else 202)


async def _remove(deps: ApiDeps, tenant: str, name: str) -> Response[None]:
    name = _known(deps, name)
    if name not in (await _models(deps, tenant)).sealed:
        return Response(None, status_code=204)
    written = await send_and_read(deps, tenant, "tenant", tenant, RemoveTenantProvider(name=name))
    return Response(None, status_code=204 if written.event is not None else 202)


@get("/providers", summary="The caller's tenant's own model provider settings (never a key)")
async def own_providers(principal: Caller, deps: Deps) -> ProvidersOut:
    return _out(await _models(deps, tenant_of(principal)))


@put("/providers/{name:str}", summary="Set the caller's tenant's own key of a model provider")
async def set_own_provider(
    name: ProviderName, data: JSONBody[ProviderBody], principal: Caller, deps: Deps
) -> Response[ProviderOut]:
    return await _set(deps, tenant_of(principal), name, data)


@delete("/providers/{name:str}", status_code=204, summary="Remove a provider's own settings")
async def remove_own_provider(name: ProviderName, principal: Caller, deps: Deps) -> Response[None]:
    return await _remove(deps, tenant_of(principal), name)


@get(
    "/tenants/{tenantId:str}/providers",
    opt={ADMIN_OPT: True},
    summary="A tenant's own model provider settings (admin; never a key)",
)
async def tenant_providers(tenant_id: TenantId, deps: Deps) -> ProvidersOut:
    return _out(await _models(deps, path_id("tenant id", tenant_id)))


@put(
    "/tenants/{tenantId:str}/providers/{name:str}",
    opt={ADMIN_OPT: True},
    summary="Set a tenant's own key of a model provider (admin)",
)
async def set_tenant_provider(
    tenant_id: TenantId, name: ProviderName, data: JSONBody[ProviderBody], deps: Deps
) -> Response[ProviderOut]:
    return await _set(deps, path_id("tenant id", tenant_id), name, data)


@delete(
    "/tenants/{tenantId:str}/providers/{name:str}",
    status_code=204,
    opt={ADMIN_OPT: True},
    summary="Remove a tenant's own settings of a model provider (admin)",
)
async def remove_tenant_provider(
    tenant_id: TenantId, name: ProviderName, deps: Deps
) -> Response[None]:
    return await _remove(deps, path_id("tenant id", tenant_id), name)


@put(
    "/tenants/{tenantId:str}/model-policy",
    opt={ADMIN_OPT: True},
    summary="Whether the operator's provider settings serve a tenant's runs (admin)",
)
async def set_model_policy(
    tenant_id: TenantId, data: JSONBody[ModelPolicyBody], deps: Deps
) -> Response[ProvidersOut]:
    tenant = path_id("tenant id", tenant_id)
    await _models(deps, tenant)
    command = SetTenantModelPolicy(operator_fallback=data.operator_fallback)
    written = await send_and_read(deps, tenant, "tenant", tenant, command)
    status = 200 if written.event is not None else 202
    return Response(_out(await _models(deps, tenant)), status_code=status)


PROVIDER_ROUTES = [
    own_providers,
    set_own_provider,
    remove_own_provider,
    tenant_providers,
    set_tenant_provider,
    remove_tenant_provider,
    set_model_policy,
]
