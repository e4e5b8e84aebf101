"""An agency's webhook subscriptions (`webhook.subscribed`, `webhook.unsubscribed`), and
its tasks' A2A push-notification configs (`push.configured`, `push.removed`): what the API
lists and the webhooks service matches each event against. Secrets and credentials stay
sealed here as on the log."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    PushConfigured,
    PushRemoved,
    WebhookSubscribed,
    WebhookUnsubscribed,
)
from agency.projections.statements import Statement, statement_projection, upsert

DDL = """
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
    tenant_id       text        NOT NULL,
    agency_id       text        NOT NULL,
    subscription_id text        NOT NULL,
    url             text        NOT NULL,
    kinds           text[]      NOT NULL,
    sealed_secret   text        NOT NULL,
    description     text        NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, agency_id, subscription_id)
);
"""

_SUBSCRIBED = upsert(
    "webhook_subscriptions",
    (
        "tenant_id",
        "agency_id",
        "subscription_id",
        "url",
        "kinds",
        "sealed_secret",
        "description",
        "created_at",
    ),
    ("tenant_id", "agency_id", "subscription_id"),
    kept=("created_at",),
)
_UNSUBSCRIBED = (
    "DELETE FROM webhook_subscriptions "
    "WHERE tenant_id = $1 AND agency_id = $2 AND subscription_id = $3"
)


def _statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case WebhookSubscribed() as s:
                yield _SUBSCRIBED, (
                    env.tenant_id, env.aggregate_id, s.subscription_id, s.url, list(s.kinds),
                    s.sealed_secret, s.description, env.ts,
                )  # fmt: skip
            case WebhookUnsubscribed(subscription_id=subscription):
                yield _UNSUBSCRIBED, (env.tenant_id, env.aggregate_id, subscription)


PROJECTION = statement_projection(
    "webhook_subscriptions",
    DDL,
    _statements,
    {"webhook.subscribed", "webhook.unsubscribed"},
    aggregate="agency",
)

PUSH_DDL = """
CREATE TABLE IF NOT EXISTS push_configs (
    tenant_id   text        NOT NULL,
    agency_id   text        NOT NULL,
    task_id     text        NOT NULL,
    config_id   text        NOT NULL,
    url         text        NOT NULL,
    sealed_auth text        NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, agency_id, task_id, config_id)
);
"""
# A config configured again is replaced, and matches from then on.
_CONFIGURED = upsert(
    "push_configs",
    ("tenant_id", "agency_id", "task_id", "config_id", "url", "sealed_auth", "created_at"),
    ("tenant_id", "agency_id", "task_id", "config_id"),
)
_REMOVED = (
    "DELETE FROM push_configs "
    "WHERE tenant_id = $1 AND agency_id = $2 AND task_id = $3 AND config_id = $4"
)


def _push_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case PushConfigured() as c:
                yield _CONFIGURED, (
                    env.tenant_id, env.aggregate_id, c.task_id, c.config_id, c.url,
                    c.sealed_auth, env.ts,
                )  # fmt: skip
            case PushRemoved(task_id=task, config_id=config):
                yield _REMOVED, (env.tenant_id, env.aggregate_id, task, config)


PUSH_CONFIGS = statement_projection(
    "push_configs",
    PUSH_DDL,
    _push_statements,
    {"push.configured", "push.removed"},
    aggregate="agency",
)
