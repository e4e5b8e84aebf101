"""The deliveries of A2A push notifications (docs/protocols.md): `GET
/agency/{agencyId}/pushDeliveries` lists them newest first, each with its task and config,
its status, attempts and last error, as `…/webhooks/{webhookId}/deliveries` does for a
subscription. `taskId` narrows it to one task. They are rows of `webhook_deliveries` of
kind `a2a.push` (`services/webhooks/push.py`); another tenant's are never read."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.exceptions import ValidationException
from litestar.params import QueryParameter

from agency.contracts.http import Out
from agency.services.a2a.push import PUSH_KIND
from agency.services.api.auth import Caller, Deps, agency_owned, tenant_and_agency
from agency.services.api.path_params import AgencyId
from agency.services.api.routes_queries import MAX_EVENTS_PAGE, int_param
from agency.services.api.routes_webhooks import DEFAULT_DELIVERIES, Delivery, delivery_fields

# `subscription_id` of a push delivery is `<task id>/<config id>` (`push_key`).
_PUSH_DELIVERIES = """
SELECT delivery_id, subscription_id, event_id, status, attempts, last_status, last_error,
    next_attempt_at, created_at, delivered_at
FROM webhook_deliveries
WHERE tenant_id = $1 AND agency_id = $2 AND kind = $3
    AND ($4::text IS NULL OR split_part(subscription_id, '/', 1) = $4)
ORDER BY created_at DESC, delivery_id LIMIT $5
"""


class PushDeliveryOut(Delivery, frozen=True, kw_only=True):
    """`status`: `pending` (`nextAttemptAt` says when), `delivered` or `failed`;
    `eventId`: the event whose change of state was pushed."""

    task_id: str
    config_id: str


class PushDeliveriesOut(Out, frozen=True, kw_only=True):
    deliveries: list[PushDeliveryOut]


@get(
    "/agency/{agencyId:str}/pushDeliveries",
    summary="The agency's A2A push-notification deliveries, newest first (of one task with taskId)",
)
async def push_deliveries(
    agency_id: AgencyId,
    principal: Caller,
    deps: Deps,
    task_id: Annotated[
        str | None,
        QueryParameter(name="taskId", description="Only this task's deliveries.", max_length=200),
    ] = None,
    limit: Annotated[str | None, QueryParameter(name="limit")] = None,
) -> PushDeliveriesOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    size = int_param("limit", limit, DEFAULT_DELIVERIES, 1, MAX_EVENTS_PAGE)
    await agency_owned(deps, tenant, agency_id)
    if task_id is not None and "/" in task_id:
        raise ValidationException(f"taskId {task_id[:80]!r}: a task id holds no '/'")
    rows = await deps.pool.fetch(_PUSH_DELIVERIES, tenant, agency_id, PUSH_KIND, task_id, size)
    return PushDeliveriesOut(
        deliveries=[
            PushDeliveryOut(
                task_id=r["subscription_id"].partition("/")[0],
                config_id=r["subscription_id"].partition("/")[2],
                **delivery_fields(r),
            )
            for r in rows
        ]
    )
