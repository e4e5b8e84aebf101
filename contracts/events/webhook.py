"""Webhook subscriptions of an agency: a URL its events of chosen kinds are POSTed to.

They are facts of the agency's log (`agency.<id>`), so a replay or an export carries them;
the `webhook_subscriptions` read model serves reads, and the webhooks service delivers
(`services/webhooks/`). A task's A2A push-notification configs are facts of the same log,
read from `push_configs` and delivered by the same service. The signing secret travels
sealed (`infra/sealing.py`), never in clear: it is shown once, to the subscription's
creator.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from agency.contracts.events.base import Event

# What an integrator subscribes to, each made of events of the log
# (`services/webhooks/kinds.py`).
WebhookKind = Literal["run.ended", "approval.needed", "subagent.reported", "workflow.proposal"]
WEBHOOK_KINDS: tuple[WebhookKind, ...] = (
    "run.ended",
    "approval.needed",
    "subagent.reported",
    "workflow.proposal",
)


class WebhookSubscription(msgspec.Struct, frozen=True, kw_only=True):
    """A subscription as asked for (`registry.subscribe_webhook`) and recorded
    (`webhook.subscribed`)."""

    subscription_id: str
    url: str
    kinds: tuple[WebhookKind, ...]
    sealed_secret: str
    description: str = ""


class WebhookSubscribed(
    Event, WebhookSubscription, frozen=True, kw_only=True, tag="webhook.subscribed"
):
    """`sealed_secret`: the Standard Webhooks secret (`whsec_…`), sealed."""


class WebhookUnsubscribed(Event, frozen=True, kw_only=True, tag="webhook.unsubscribed"):
    subscription_id: str


class PushConfig(msgspec.Struct, frozen=True, kw_only=True):
    """A task's push-notification config as asked for (`registry.configure_push`) and
    recorded (`push.configured`)."""

    task_id: str
    config_id: str
    url: str
    sealed_auth: str


class PushConfigured(Event, PushConfig, frozen=True, kw_only=True, tag="push.configured"):
    """An A2A push-notification config of a task (`task_id`: `<thread id>.<run id>`): the
    task's updates are POSTed to `url`. `sealed_auth` holds what the POST carries to
    authenticate it (the config's token, its scheme and credentials), sealed. The same
    `config_id` configured again replaces it."""


class PushRemoved(Event, frozen=True, kw_only=True, tag="push.removed"):
    task_id: str
    config_id: str


WebhookEvent = WebhookSubscribed | WebhookUnsubscribed | PushConfigured | PushRemoved
