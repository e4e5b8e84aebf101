"""The log's side of webhook subscriptions: each event of a subscribed kind becomes one
delivery per matching subscription, durable `webhook-subscriptions`.

The event is acknowledged only once its deliveries are stored, so a service stopped or
killed before that reads it again, and makes the same deliveries (the same ids: nothing
twice). A subscription matches the events of its agency, of its kinds, written since it was
made.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agency.infra.jetstream.records import RecordedEvent
from agency.services.webhooks.deliveries import Deliveries
from agency.services.webhooks.kinds import message_of

log = structlog.get_logger(__name__)


class Fanout:
    def __init__(self, deliveries: Deliveries, made: Callable[[], None]) -> None:
        self._deliveries = deliveries
        self._made = made

    async def handle(self, event: RecordedEvent) -> None:
        message = message_of(event)
        env = event.envelope
        if message is None or env.agency_id is None:
            return
        kind, body = message
        count = await self._deliveries.enqueue(
            env.tenant_id, env.agency_id, kind, env.event_id, env.ts, body
        )
        if count:
            log.info("webhook deliveries made", kind=kind, count=count)
            self._made()
