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
from agency.projections.statements import Statement, Table, statement_projection

SUBSCRIPTIONS = Table(
    "webhook_subscriptions",
    {
        "tenant_id": "text NOT NULL",
        "agency_id": "text NOT NULL",
        "subscription_id": "text NOT NULL",
        "url": "text NOT NULL",
        "kinds": "text[] NOT NULL",
        "sealed_secret": "text NOT NULL",
        "description": "text NOT NULL",
        "created_at": "timestamptz NOT NULL",
    },
    ("tenant_id", "agency_id", "subscription_id"),
    kept=("created_at",),
)
_SUBSCRIBED = SUBSCRIPTIONS.upsert
_UNSUBSCRIBED = SUBSCRIPTIONS.delete()


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
    SUBSCRIPTIONS.ddl,
    _statements,
    {"webhook.subscribed", "webhook.unsubscribed"},
    aggregate="agency",
)

PUSH_CONFIG_TABLE = Table(
    "push_configs",
    {
        "tenant_id": "text NOT NULL",
        "agency_id": "text NOT NULL",
        "task_id": "text NOT NULL",
        "config_id": "text NOT NULL",
        "url": "text NOT NULL",
        "sealed_auth": "text NOT NULL",
        "created_at": "timestamptz NOT NULL",
    },
    ("tenant_id", "agency_id", "task_id", "config_id"),
)
# A config configured again is replaced, and matches from then on.
_CONFIGURED = PUSH_CONFIG_TABLE.upsert
_REMOVED = PUSH_CONFIG_TABLE.delete()


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
    PUSH_CONFIG_TABLE.ddl,
    _push_statements,
    {"push.configured", "push.removed"},
    aggregate="agency",
)
