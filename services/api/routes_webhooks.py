"""An agency's webhook subscriptions: `POST /agency/{agencyId}/webhooks` subscribes a URL
to event kinds (`run.ended`, `approval.needed`, `subagent.reported`, `workflow.proposal`)
and answers the subscription's secret, once: `whsec_…`, as Standard Webhooks has it.
`GET` lists them (never a secret), `DELETE …/webhooks/{webhookId}` removes one, and
`GET …/webhooks/{webhookId}/deliveries` shows each delivery's status, attempts and last
error. The URL meets the egress rule (`services/egress.py`) here and on every delivery.
Deliveries are made by the webhooks service (`services/webhooks/`, docs/protocols.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from asyncpg import Record
from litestar import Response, delete, get, post
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import JSONBody, QueryParameter

from agency.contracts.commands import SubscribeWebhook, UnsubscribeWebhook
from agency.contracts.events import WebhookKind
from agency.contracts.events.blueprint_fields import URL_WITH_HOST
from agency.contracts.http import Out
from agency.contracts.ids import new_id
from agency.infra.sealing import seal
from agency.services.api.auth import Caller, Deps, agency_owned, path_id, tenant_and_agency
from agency.services.api.deps import ApiDeps
from agency.services.api.egress_door import refuse_unreachable
from agency.services.api.openapi import empty_response
from agency.services.api.path_params import AgencyId, WebhookId
from agency.services.api.readback import send_and_read
from agency.services.api.routes_commands import Body
from agency.services.api.routes_queries import MAX_EVENTS_PAGE, int_param
from agency.services.webhook_signing import MAX_URL, new_secret, url_form_problem

DEFAULT_DELIVERIES = 50


class WebhookBody(Body, frozen=True, kw_only=True):
    """`url`: where deliveries are POSTed (http or https); `events`: the kinds subscribed."""

    # The pattern is the document's account of `url_form_problem`, which says what is wrong;
    # an address the egress rule refuses is a 403 (`refuse_unreachable`).
    url: Annotated[
        str,
        msgspec.Meta(
            min_length=1, max_length=MAX_URL, extra_json_schema={"pattern": URL_WITH_HOST}
        ),
    ]
    events: Annotated[list[WebhookKind], msgspec.Meta(min_length=1, max_length=16)]
    description: Annotated[str, msgspec.Meta(max_length=500)] = ""


class WebhookOut(Out, frozen=True, kw_only=True):
    id: str
    url: str
    events: list[str]
    description: str
    created_at: datetime | None = None


class WebhookCreated(WebhookOut, frozen=True, kw_only=True):
    """`secret`: shown this once; it signs every delivery (`webhook-signature`)."""

    secret: str


class WebhooksOut(Out, frozen=True, kw_only=True):
    webhooks: list[WebhookOut]


class Delivery(Out, frozen=True, kw_only=True):
    """The fields of every delivery's answer, as `delivery_fields` reads them from its row."""

    id: str
    event_id: str
    status: str
    attempts: int
    last_status: int | None
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime
    delivered_at: datetime | None


class DeliveryOut(Delivery, frozen=True, kw_only=True):
    """`status`: `pending` (`nextAttemptAt` says when), `delivered` or `failed`."""

    event: str


class DeliveriesOut(Out, frozen=True, kw_only=True):
    deliveries: list[DeliveryOut]


_LIST = """
SELECT subscription_id, url, kinds, description, created_at FROM webhook_subscriptions
WHERE tenant_id = $1 AND agency_id = $2 ORDER BY created_at, subscription_id
"""
_ONE = """
SELECT 1 FROM webhook_subscriptions
WHERE tenant_id = $1 AND agency_id = $2 AND subscription_id = $3
"""
_DELIVERIES = """
SELECT delivery_id, event_id, kind, status, attempts, last_status, last_error,
    next_attempt_at, created_at, delivered_at
FROM webhook_deliveries
WHERE tenant_id = $1 AND agency_id = $2 AND subscription_id = $3
ORDER BY created_at DESC, delivery_id LIMIT $4
"""


async def _subscription(deps: ApiDeps, tenant: str, agency_id: str, webhook_id: str) -> None:
    """404 unless the agency has the subscription (another tenant's looks the same)."""
    path_id("webhook id", webhook_id)
    await agency_owned(deps, tenant, agency_id)
    if await deps.pool.fetchval(_ONE, tenant, agency_id, webhook_id) is None:
        raise NotFoundException(f"agency {agency_id} has no webhook {webhook_id}")


@post(
    "/agency/{agencyId:str}/webhooks",
    status_code=201,
    summary="Subscribe a URL to the agency's events of chosen kinds (the secret is shown once)",
)
async def subscribe_webhook(
    agency_id: AgencyId, data: JSONBody[WebhookBody], principal: Caller, deps: Deps
) -> Response[WebhookCreated]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    if (problem := url_form_problem(data.url)) is not None:
        raise ValidationException(f"field 'url': {problem}")
    refuse_unreachable("url", data.url)
    await agency_owned(deps, tenant, agency_id)
    kinds = tuple(dict.fromkeys(data.events))
    secret = new_secret()
    command = SubscribeWebhook(
        agency_id=agency_id,
        subscription_id="wh_" + new_id().lower(),
        url=data.url,
        kinds=kinds,
        sealed_secret=seal({"secret": secret}),
        description=data.description,
    )
    written = await send_and_read(deps, tenant, "agency", agency_id, command, from_end=True)
    body = WebhookCreated(
        id=command.subscription_id,
        url=data.url,
        events=list(kinds),
        description=data.description,
        created_at=written.event.envelope.ts if written.event else None,
        secret=secret,
    )
    return Response(body, status_code=201 if written.readable else 202)


@get("/agency/{agencyId:str}/webhooks", summary="The agency's webhook subscriptions")
async def list_webhooks(agency_id: AgencyId, principal: Caller, deps: Deps) -> WebhooksOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_owned(deps, tenant, agency_id)
    rows = await deps.pool.fetch(_LIST, tenant, agency_id)
    return WebhooksOut(
        webhooks=[
            WebhookOut(
                id=r["subscription_id"],
                url=r["url"],
                events=list(r["kinds"]),
                description=r["description"],
                created_at=r["created_at"],
            )
            for r in rows
        ]
    )


@delete(
    "/agency/{agencyId:str}/webhooks/{webhookId:str}",
    status_code=204,
    summary="Remove a webhook subscription: nothing more is delivered to it",
    responses={
        204: empty_response("Removed: nothing more is delivered to it."),
        202: empty_response("Accepted: removed once the registry records it."),
    },
)
async def remove_webhook(
    agency_id: AgencyId, webhook_id: WebhookId, principal: Caller, deps: Deps
) -> Response[None]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await _subscription(deps, tenant, agency_id, webhook_id)
    command = UnsubscribeWebhook(agency_id=agency_id, subscription_id=webhook_id)
    written = await send_and_read(deps, tenant, "agency", agency_id, command, from_end=True)
    return Response(None, status_code=204 if written.readable else 202)


@get(
    "/agency/{agencyId:str}/webhooks/{webhookId:str}/deliveries",
    summary="A webhook subscription's deliveries, newest first: status, attempts, last error",
)
async def webhook_deliveries(
    agency_id: AgencyId,
    webhook_id: WebhookId,
    principal: Caller,
    deps: Deps,
    limit: Annotated[str | None, QueryParameter(name="limit")] = None,
) -> DeliveriesOut:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    size = int_param("limit", limit, DEFAULT_DELIVERIES, 1, MAX_EVENTS_PAGE)
    await _subscription(deps, tenant, agency_id, webhook_id)
    rows = await deps.pool.fetch(_DELIVERIES, tenant, agency_id, webhook_id, size)
    return DeliveriesOut(
        deliveries=[DeliveryOut(event=r["kind"], **delivery_fields(r)) for r in rows]
    )


def delivery_fields(r: Record) -> dict[str, Any]:
    """A `webhook_deliveries` row's fields as every delivery's answer names them."""
    return {
        "id": r["delivery_id"],
        "event_id": r["event_id"],
        "status": r["status"],
        "attempts": r["attempts"],
        "last_status": r["last_status"],
        "last_error": r["last_error"],
        "next_attempt_at": r["next_attempt_at"] if r["status"] == "pending" else None,
        "created_at": r["created_at"],
        "delivered_at": r["delivered_at"],
    }


WEBHOOK_ROUTES = [subscribe_webhook, list_webhooks, remove_webhook, webhook_deliveries]
