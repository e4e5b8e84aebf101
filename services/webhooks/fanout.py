"""The log's side of webhook subscriptions: each event of a subscribed kind becomes one
delivery per matching subscription, durable `webhook-subscriptions`.

The event is acknowledged only once its deliveries are stored, so a service stopped or
killed before that reads it again, and makes the same deliveries (the same ids: nothing
twice). A subscription matches the events of its agency, of its kinds, written since it was
made. A workflow's events written by its members' tools name no agency: the workflow's
is read from the `workflows` read model.

The durable's filter spans threads' and workflows' events: `SUBSCRIBED_EVENTS` names its
subjects. It is created on the
service's first start, delivering from the start of the log (a subscription only matches
what was written after it was made, so an old log delivers nothing old).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agency.infra.jetstream.consumers import DurableSpec
from agency.infra.jetstream.records import RecordedEvent
from agency.services.webhooks.deliveries import Deliveries
from agency.services.webhooks.kinds import KIND_OF_TYPE, message_of

log = structlog.get_logger(__name__)

# Threads' events, and `proposal.opened` of workflows.
SUBSCRIBED_EVENTS = DurableSpec(
    "webhook-subscriptions", tuple(KIND_OF_TYPE), aggregates=("thread", "workflow")
)


class WorkflowUnknown(Exception):
    """A workflow's event whose workflow the read model does not show yet."""

    def __init__(self, workflow_id: str) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"workflow {workflow_id} is not in the workflows read model yet")


class Fanout:
    def __init__(self, deliveries: Deliveries, made: Callable[[], None]) -> None:
        self._deliveries = deliveries
        self._made = made

    async def handle(self, event: RecordedEvent) -> None:
        env = event.envelope
        agency = env.agency_id
        if agency is None and env.aggregate == "workflow" and env.type in KIND_OF_TYPE:
            agency = await self._deliveries.workflow_agency(env.tenant_id, env.aggregate_id)
            if agency is None:
                # Read again later (redelivered with backoff), once the read model has it.
                raise WorkflowUnknown(env.aggregate_id)
        message = message_of(event, agency)
        if message is None or agency is None:
            return
        kind, body = message
        count = await self._deliveries.enqueue(
            env.tenant_id, agency, kind, env.event_id, env.ts, body
        )
        if count:
            log.info("webhook deliveries made", kind=kind, count=count)
            self._made()
