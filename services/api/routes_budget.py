"""Spend budgets over HTTP (`services/tenancy/spend.py` has the rules): the operator sets a
tenant's with `PUT /tenants/{tenantId}/budget` (admin), a tenant sets one of its agencies'
with `PUT /agency/{agencyId}/budget`, within its own. `GET` on either, and `GET /budget`
for the caller's tenant, answers the budgets in force, what was spent this period and
when it resets. A budget field left out (or null) takes the level above's; 0 is none."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec
from litestar.exceptions import ClientException

from agency.contracts.commands import SetAgencyBudget, SetTenantBudget
from agency.contracts.http import Out
from agency.services.api.deps import ApiDeps
from agency.services.api.openapi import error_response
from agency.services.api.routes_commands import Body
from agency.services.api.scoped_setting import Doc, ScopedSetting, send_setting, setting_routes
from agency.services.tenancy.spend import period_end, period_start


class BudgetBody(Body, frozen=True, kw_only=True):
    """Per period (`AGENCY_SPEND_PERIOD`): `tokens` (input and output together) and `usd`;
    null takes the level above's, 0 is no budget."""

    tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    usd: Annotated[float, msgspec.Meta(ge=0)] | None = None


class BudgetOut(Out, frozen=True, kw_only=True):
    """A scope's budget in force (0: none) and what it spent in the period so far."""

    scope: str
    id: str
    period: str
    period_start: datetime
    resets_at: datetime
    token_budget: int
    usd_budget: float
    tokens_spent: int
    usd_spent: float


async def _standing(deps: ApiDeps, tenant: str, agency: str = "") -> BudgetOut:
    now = datetime.now(UTC)
    standing = await deps.spend.standing(tenant, agency, now)
    budget, spent = (
        (standing.agency, standing.agency_spent)
        if agency
        else (standing.tenant, standing.tenant_spent)
    )
    period = deps.spend.settings.period
    return BudgetOut(
        scope="agency" if agency else "tenant",
        id=agency or tenant,
        period=period,
        period_start=period_start(period, now),
        resets_at=period_end(period, now),
        token_budget=budget.tokens,
        usd_budget=budget.usd,
        tokens_spent=spent.tokens,
        usd_spent=round(spent.usd, 8),
    )


async def _set_tenant(deps: ApiDeps, tenant: str, data: BudgetBody) -> BudgetOut:
    command = SetTenantBudget(tokens=data.tokens, usd=data.usd)
    await send_setting(deps, tenant, "tenant", tenant, command)
    deps.spend.forget(tenant)
    return await _standing(deps, tenant)


def _beyond(asked: float | None, outer: float) -> bool:
    """An agency's budget asked for that the tenant's does not hold (0 is none at all)."""
    return bool(outer) and asked is not None and (asked == 0 or asked > outer)


async def _set_agency(deps: ApiDeps, tenant: str, agency_id: str, data: BudgetBody) -> BudgetOut:
    outer = (await deps.spend.standing(tenant, agency_id)).tenant
    period = deps.spend.settings.period
    # The tenant's budget is state the request conflicts with, not a rule of its body.
    if _beyond(data.tokens, outer.tokens):
        raise ClientException(
            status_code=409,
            detail=f"field 'tokens': the agency's budget must be within the tenant's, "
            f"{outer.tokens} tokens a {period}",
        )
    if _beyond(data.usd, outer.usd):
        raise ClientException(
            status_code=409,
            detail=f"field 'usd': the agency's budget must be within the tenant's, "
            f"${outer.usd:g} a {period}",
        )
    command = SetAgencyBudget(agency_id=agency_id, tokens=data.tokens, usd=data.usd)
    await send_setting(deps, tenant, "agency", agency_id, command)
    deps.spend.forget(tenant)
    return await _standing(deps, tenant, agency_id)


BUDGET_ROUTES = setting_routes(
    ScopedSetting(
        "budget",
        BudgetBody,
        BudgetOut,
        _standing,
        _set_tenant,
        _set_agency,
        get_own=Doc(
            "own_budget", "The caller's tenant's spend budget and what it spent this period"
        ),
        put_own=None,
        get_tenant=Doc(
            "tenant_budget", "A tenant's spend budget and what it spent this period (admin)"
        ),
        put_tenant=Doc("set_tenant_budget", "Set a tenant's spend budget per period (admin)"),
        get_agency=Doc("agency_budget", "An agency's spend budget and what it spent this period"),
        put_agency=Doc(
            "set_agency_budget",
            "Set an agency's spend budget per period, within the tenant's",
            {409: error_response(409, "Beyond the tenant's budget: the answer says the tenant's.")},
        ),
    )
)
