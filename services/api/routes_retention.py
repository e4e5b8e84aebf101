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
from litestar.exceptions import ClientException

from agency.contracts.commands import SetAgencyRetention, SetTenantRetention
from agency.contracts.http import Out
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import error_response
from agency.services.api.routes_commands import Body
from agency.services.api.scoped_setting import Doc, ScopedSetting, send_setting, setting_routes
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


def _conflict(problem: str | None) -> None:
    # The level above is state the request conflicts with, not a rule of its body.
    if problem is not None:
        raise ClientException(status_code=409, detail=problem)


async def _set_tenant(deps: ApiDeps, tenant: str, data: RetentionBody) -> RetentionOut:
    seconds = data.in_seconds()
    _conflict(tenant_refusal(seconds, deps.settings.retention))
    await send_setting(deps, tenant, "tenant", tenant, SetTenantRetention(seconds=seconds))
    return await _out(deps, tenant)


_CONFLICT = {409: error_response(409, "Beyond the level above: the answer says its retention.")}


async def _set_agency(
    deps: ApiDeps, tenant: str, agency_id: str, data: RetentionBody
) -> RetentionOut:
    seconds = data.in_seconds()
    async with deps.pool.acquire() as conn:
        held = await standing(conn, deps.settings.retention, tenant)
    _conflict(refusal(seconds, held.tenant_seconds, "the tenant's"))
    command = SetAgencyRetention(agency_id=agency_id, seconds=seconds)
    await send_setting(deps, tenant, "agency", agency_id, command)
    return await _out(deps, tenant, agency_id)


RETENTION_ROUTES = setting_routes(
    ScopedSetting(
        "retention",
        RetentionBody,
        RetentionOut,
        _out,
        _set_tenant,
        _set_agency,
        get_own=Doc("own_retention", "How long the caller's tenant keeps its threads"),
        put_own=Doc(
            "set_own_retention",
            "Set how long the caller's tenant keeps its threads, within the operator's maximum",
            _CONFLICT,
        ),
        get_tenant=Doc("tenant_retention", "How long a tenant keeps its threads (admin)"),
        put_tenant=Doc(
            "set_tenant_retention",
            "Set how long a tenant keeps its threads (admin)",
            _CONFLICT,
        ),
        get_agency=Doc("agency_retention", "How long an agency keeps its threads"),
        put_agency=Doc(
            "set_agency_retention",
            "Set how long an agency keeps its threads, within the tenant's",
            _CONFLICT,
        ),
    )
)
