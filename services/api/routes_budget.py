"""Spend budgets over HTTP (`services/tenancy/spend.py` has the rules): the operator sets a
tenant's with `PUT /tenants/{tenantId}/budget` (admin), a tenant sets one of its agencies'
with `PUT /agency/{agencyId}/budget`, within its own. `GET` on either, and `GET /budget`
for the caller's tenant, answers the budgets in force, what was spent this period and
when it resets. A budget field left out (or null) takes the level above's; 0 is none."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec
from litestar import get, put
from litestar.exceptions import ClientException, NotFoundException
from litestar.params import JSONBody

from agency.contracts.commands import SetAgencyBudget, SetTenantBudget
from agency.contracts.http import Out
from agency.contracts.ids import new_id
from agency.contracts.subjects import Aggregate
from agency.domain.tenant_life import is_live_tenant
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
from agency.services.api.routes_commands import Body
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


async def _send(
    deps: ApiDeps,
    tenant: str,
    aggregate: Aggregate,
    aggregate_id: str,
    command: SetTenantBudget | SetAgencyBudget,
) -> None:
    key = new_id()
    await read_your_write(
        deps, tenant, aggregate, aggregate_id, key,
        send=lambda: deps.bus.commands.send(tenant, command, idempotency_key=key),
    )  # fmt: skip
    deps.spend.forget(tenant)


async def existing_tenant(deps: ApiDeps, tenant: str) -> None:
    history = await deps.bus.store.read(tenant, "tenant", tenant)
    if not is_live_tenant(history):
        raise NotFoundException(f"tenant {tenant} not found")


def _beyond(asked: float | None, outer: float) -> bool:
    """An agency's budget asked for that the tenant's does not hold (0 is none at all)."""
    return bool(outer) and asked is not None and (asked == 0 or asked > outer)


@get("/budget", summary="The caller's tenant's spend budget and what it spent this period")
async def own_budget(principal: Caller, deps: Deps) -> BudgetOut:
    return await _standing(deps, tenant_of(principal))


@get(
    "/tenants/{tenantId:str}/budget",
    opt={ADMIN_OPT: True},
    summary="A tenant's spend budget and what it spent this period (admin)",
)
async def tenant_budget(tenant_id: TenantId, deps: Deps) -> BudgetOut:
    tenant = path_id("tenant id", tenant_id)
    await existing_tenant(deps, tenant)
    return await _standing(deps, tenant)


@put(
    "/tenants/{tenantId:str}/budget",
    opt={ADMIN_OPT: True},
    summary="Set a tenant's spend budget per period (admin)",
)
async def set_tenant_budget(
    tenant_id: TenantId, data: JSONBody[BudgetBody], deps: Deps
) -> BudgetOut:
    tenant = path_id("tenant id", tenant_id)
    await existing_tenant(deps, tenant)
    await _send(deps, tenant, "tenant", tenant, SetTenantBudget(tokens=data.tokens, usd=data.usd))
    return await _standing(deps, tenant)


@get(
    "/agency/{agencyId:str}/budget",
    summary="An agency's spend budget and what it spent this period",
)
async def agency_budget(agency_id: AgencyId, principal: Caller, deps: Deps) -> BudgetOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_events(deps, tenant, agency_id)
    return await _standing(deps, tenant, agency_id)


@put(
    "/agency/{agencyId:str}/budget",
    summary="Set an agency's spend budget per period, within the tenant's",
    responses={
        409: error_response(409, "Beyond the tenant's budget: the answer says the tenant's.")
    },
)
async def set_agency_budget(
    agency_id: AgencyId, data: JSONBody[BudgetBody], principal: Caller, deps: Deps
) -> BudgetOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_events(deps, tenant, agency_id)
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
    await _send(deps, tenant, "agency", agency_id, command)
    return await _standing(deps, tenant, agency_id)


BUDGET_ROUTES = [own_budget, tenant_budget, set_tenant_budget, agency_budget, set_agency_budget]
