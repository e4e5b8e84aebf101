"""A schedule is admitted at the door: its cron fires no more often than a schedule may
(400), and its tenant has room for one more (409), each refusal naming its limit
(`ScheduleLimits`, docs/operations.md). The tenant's count is the read model's: a fairness
bound, which two adds at the same moment may pass by one."""

from __future__ import annotations

from litestar.exceptions import ClientException, ValidationException

from agency.projections import workflow_queries as q
from agency.services.api.deps import ApiDeps
from agency.services.tenancy.fairness import refuse_schedule, schedule_problem


def checked_cron(deps: ApiDeps, cron: str) -> str:
    """`cron`, or 400 naming why a schedule may not have it."""
    problem = schedule_problem(cron, deps.settings.schedules)
    if problem:
        raise ValidationException(problem)
    return cron


async def room_for_schedule(deps: ApiDeps, tenant: str) -> None:
    """409 when one more schedule would pass the tenant's limit."""
    limits = deps.settings.schedules
    if not limits.max_per_tenant:
        return
    async with deps.pool.acquire() as conn:
        active = await q.active_schedule_count(conn, tenant)
    refused = refuse_schedule(active, limits)
    if refused:
        raise ClientException(refused, status_code=409)
