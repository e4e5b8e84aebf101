"""Retention over HTTP (`services/threads/retention_policy.py` has the rules): how long a
tenant's, or an agency's, threads are kept after their last activity before they are
deleted as `DELETE /threads/{threadId}` deletes them.

A tenant sets its own (`PUT /retention`; the operator, `PUT /tenants/{tenantId}/retention`)
within the operator's maximum, and one of its agencies' (`PUT /agency/{agencyId}/retention`)
within its own; 409 beyond. A body gives `days` and `seconds` (added up; both null: the
level above's). `GET` on each answers what is set and what holds."""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import get, put
from litestar.exceptions import ClientException
from litestar.params import JSONBody

from agency.contracts.commands import SetAgencyRetention, SetTenantRetention
from agency.contracts.http import Out
from agency.contracts.ids import new_id
from agency.contracts.subjects import Aggregate
from agency.services.api.auth import (
    ADMIN_OPT,
    AgencyId,
    Caller,
    Deps,
    TenantId,
    agency_events,
    path_id,
    tenant_and_agency,
    tenant_of,
)
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import error_response
from agency.services.api.readback import read_your_write
from agency.services.api.routes_budget import existing_tenant
from agency.services.api.routes_commands import Body
from agency.services.threads.retention_policy import DAY, refusal, standing, tenant_refusal

# A hundred years at most: any longer is "no limit" (0).
Days = Annotated[float, msgspec.Meta(ge=0, le=36500)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=36500 * DAY)]


class RetentionBody(Body, frozen=True, kw_only=True):
    """How long threads are kept after their last activity: `days` (fractions allowed)
    and `seconds`, added up as a duration's; 0 is no limit of this level's own, both null
    (or absent) the level above's."""

    days: Days | None = None
    seconds: Seconds | None = None

    def in_seconds(self) -> float | None:
        if self.days is None and self.seconds is None:
            return None
        return (self.days or 0.0) * DAY + (self.seconds or 0.0)


class RetentionOut(Out, frozen=True, kw_only=True):
    """A scope's retention: as set (null: the level above's) and in force (0: none), with
    the operator's default and maximum (0: none), all in seconds."""

    scope: str
    id: str
    retention_seconds: float | None
    effective_seconds: float
    operator_default_seconds: float
    operator_max_seconds: float


async def _out(deps: ApiDeps, tenant: str, agency: str = "") -> RetentionOut:
    async with deps.pool.acquire() as conn:
        held = await standing(conn, deps.settings.retention, tenant, agency)
    return RetentionOut(
        scope="agency" if agency else "tenant",
        id=agency or tenant,
        retention_seconds=held.agency if agency else held.tenant,
        effective_seconds=held.agency_seconds if agency else held.tenant_seconds,
        operator_default_seconds=deps.settings.retention.default_seconds,
        operator_max_seconds=deps.settings.retention.max_seconds,
    )


async def _send(
    deps: ApiDeps,
    tenant: str,
    aggregate: Aggregate,
    aggregate_id: str,
    command: SetTenantRetention | SetAgencyRetention,
) -> None:
    key = new_id()
    await read_your_write(
        deps, tenant, aggregate, aggregate_id, key,
        send=lambda: deps.bus.commands.send(tenant, command, idempotency_key=key),
    )  # fmt: skip


def _conflict(problem: str | None) -> None:
    # The level above is state the request conflicts with, not a rule of its body.
    if problem is not None:
        raise ClientException(status_code=409, detail=problem)


async def _set_tenant(deps: ApiDeps, tenant: str, data: RetentionBody) -> RetentionOut:
    seconds = data.in_seconds()
    _conflict(tenant_refusal(seconds, deps.settings.retention))
    await _send(deps, tenant, "tenant", tenant, SetTenantRetention(seconds=seconds))
    return await _out(deps, tenant)


_CONFLICT = {409: error_response(409, "Beyond the level above: the answer says its retention.")}


@get("/retention", summary="How long the caller's tenant keeps its threads")
async def own_retention(principal: Caller, deps: Deps) -> RetentionOut:
    return await _out(deps, tenant_of(principal))


@put(
    "/retention",
    summary="Set how long the caller's tenant keeps its threads, within the operator's maximum",
    responses=_CONFLICT,
)
async def set_own_retention(
    data: JSONBody[RetentionBody], principal: Caller, deps: Deps
) -> RetentionOut:
    return await _set_tenant(deps, tenant_of(principal), data)


@get(
    "/tenants/{tenantId:str}/retention",
    opt={ADMIN_OPT: True},
    summary="How long a tenant keeps its threads (admin)",
)
async def tenant_retention(tenant_id: TenantId, deps: Deps) -> RetentionOut:
    tenant = path_id("tenant id", tenant_id)
    await existing_tenant(deps, tenant)
    return await _out(deps, tenant)


@put(
    "/tenants/{tenantId:str}/retention",
    opt={ADMIN_OPT: True},
    summary="Set how long a tenant keeps its threads (admin)",
    responses=_CONFLICT,
)
async def set_tenant_retention(
    tenant_id: TenantId, data: JSONBody[RetentionBody], deps: Deps
) -> RetentionOut:
    tenant = path_id("tenant id", tenant_id)
    await existing_tenant(deps, tenant)
    return await _set_tenant(deps, tenant, data)


@get("/agency/{agencyId:str}/retention", summary="How long an agency keeps its threads")
async def agency_retention(agency_id: AgencyId, principal: Caller, deps: Deps) -> RetentionOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_events(deps, tenant, agency_id)
    return await _out(deps, tenant, agency_id)


@put(
    "/agency/{agencyId:str}/retention",
    summary="Set how long an agency keeps its threads, within the tenant's",
    responses=_CONFLICT,
)
async def set_agency_retention(
    agency_id: AgencyId, data: JSONBody[RetentionBody], principal: Caller, deps: Deps
) -> RetentionOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_events(deps, tenant, agency_id)
    seconds = data.in_seconds()
    async with deps.pool.acquire() as conn:
        held = await standing(conn, deps.settings.retention, tenant)
    _conflict(refusal(seconds, held.tenant_seconds, "the tenant's"))
    await _send(
        deps, tenant, "agency", agency_id, SetAgencyRetention(agency_id=agency_id, seconds=seconds)
    )
    return await _out(deps, tenant, agency_id)


RETENTION_ROUTES = [
    own_retention,
    set_own_retention,
    tenant_retention,
    set_tenant_retention,
    agency_retention,
    set_agency_retention,
]
