"""Tokens and cost of a thread and of each of its runs (the tenant's totals are `/usage`)."""

from __future__ import annotations

from litestar import get
from litestar.exceptions import NotFoundException

from agency.projections.costs import ThreadCost, thread_cost
from agency.services.api.auth import Caller, Deps, path_id, tenant_and_agency
from agency.services.api.path_params import AgencyId, ThreadId


@get(
    "/agency/{agencyId:str}/agent/{threadId:str}/usage",
    summary="Tokens and cost of a thread, run by run",
)
async def thread_usage(
    agency_id: AgencyId, thread_id: ThreadId, principal: Caller, deps: Deps
) -> ThreadCost:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    thread_id = path_id("thread id", thread_id)
    async with deps.pool.acquire() as conn:
        cost = await thread_cost(conn, tenant, agency_id, thread_id)
    if cost is None:
        raise NotFoundException(f"thread {thread_id} not found in agency {agency_id}")
    return cost


USAGE_ROUTES = [thread_usage]
