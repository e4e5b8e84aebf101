"""A schedule is admitted at the door: its cron is one we accept (400), fires no more often
than the operator lets a schedule fire (403: well formed, and forbidden by a setting the
document cannot state), and its tenant has room for one more (409), each refusal naming
its limit (`ScheduleLimits`, docs/operations.md). The tenant's count is the read model's:
a fairness bound, which two adds at the same moment may pass by one."""

from __future__ import annotations

from litestar.exceptions import ClientException, PermissionDeniedException, ValidationException

from agency.domain.cron import cron_problem
from agency.projections import workflow_queries as q
from agency.services.api.deps import ApiDeps
from agency.services.tenancy.fairness import frequency_problem, refuse_schedule


def checked_cron(deps: ApiDeps, cron: str) -> str:
    """`cron`, or 400 naming why it is no cron we accept, or 403 naming the limit of how
    often a schedule may fire."""
    problem = cron_problem(cron)
    if problem:
        raise ValidationException(problem)
    problem = frequency_problem(cron, deps.settings.schedules)
    if problem:
        raise PermissionDeniedException(problem)
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
