"""The durable consumers services share, defined in one place.

They are created when the streams are provisioned, while the log is still empty, and
deliver from the start: a service that comes up after the first events were written still
sees them (a consumer created on first use with "new events only" would miss whatever was
written before its first start). Services update their consumer's timing when they start.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.js.errors import BadRequestError, NotFoundError

from agency.contracts.partitions import EventLayout
from agency.contracts.subjects import EVENTS_STREAM, Aggregate

STREAM_NOT_FOUND = 10059


@dataclass(frozen=True, slots=True)
class DurableSpec:
    """A durable consumer of the events of `event_types`, read from the aggregates named
    (threads by default). It receives every event of those aggregates (one subject per
    aggregate instance) and its workers pass over the other types by their
    `Agency-Event-Type` header, without decoding them (`wants`)."""

    name: str
    event_types: tuple[str, ...]
    aggregates: tuple[Aggregate, ...] = ("thread",)

    @property
    def subjects(self) -> list[str]:
        return self.subjects_in(EventLayout(), 0)

    def subjects_in(self, layout: EventLayout, partition: int) -> list[str]:
        """Its filters on the stream of one partition of `layout`."""
        return [layout.aggregate_filter(a, partition=partition) for a in self.aggregates]

    def wants(self, event_type: str) -> bool:
        return event_type in self.event_types

    def config(
        self,
        *,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
        max_ack_pending: int = 1024,
        layout: EventLayout | None = None,
        partition: int = 0,
    ) -> ConsumerConfig:
        """Its definition; on a log of partitions, the one on `partition`'s stream (a durable
        of the same name on each)."""
        subjects = self.subjects_in(layout or EventLayout(), partition)
        return ConsumerConfig(
            durable_name=self.name,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            filter_subjects=subjects if len(subjects) > 1 else None,
            filter_subject=subjects[0] if len(subjects) == 1 else None,
            max_deliver=max_deliver,
            ack_wait=ack_wait,
            max_ack_pending=max_ack_pending,
        )


RUNTIME_TRIGGERS = DurableSpec(
    "runtime-triggers",
    (
        "request.accepted",
        "hitl.resume",
        "tool.output",
        "tool.error",
        "run.canceled",
        "subagent.completed",
    ),
)
TOOL_REQUESTS = DurableSpec("tools", ("tool.requested",))
SUBAGENT_EVENTS = DurableSpec(
    "subagents",
    (
        "subagent.requested",
        "subagent.messaged",
        "thread.created",
        "session.status",
        "subagent.parent_notified",
        "subagent.status_set",
        "subagent.terminate_requested",
        "thread.terminated",
        "request.rejected",
        "run.completed",
        "run.error",
        "run.canceled",
    ),
)
# Run terminals and pauses, for the runs whose request named a webhook (`services/webhooks/`).
WEBHOOK_EVENTS = DurableSpec(
    "webhooks", ("run.completed", "run.error", "run.canceled", "run.paused")
)
# The same, for the runs whose request asked for their thread's deletion at their end
# (`services/threads/run_end.py`).
RUN_END_DELETIONS = DurableSpec(
    "run_end_deletions", ("run.completed", "run.error", "run.canceled", "run.paused")
)
# Requests to forget an end user or delete an agency, on the tenant's aggregate
# (`services/threads/scope_erasure.py`).
ERASURE_REQUESTS = DurableSpec(
    "erasures",
    ("end_user.forget_requested", "agency.deletion_requested", "tenant.deletion_requested"),
    ("tenant",),
)
ALL_DURABLES = (
    RUNTIME_TRIGGERS,
    TOOL_REQUESTS,
    SUBAGENT_EVENTS,
    WEBHOOK_EVENTS,
    RUN_END_DELETIONS,
    ERASURE_REQUESTS,
)


# "consumer name already in use", "consumer already exists (and is active)": a concurrent
# start created it first, which is as good as creating it ourselves.
CONSUMER_EXISTS = frozenset({10013, 10105, 10148})


async def _info(js: JetStreamContext, name: str, stream: str) -> ConsumerInfo | None:
    try:
        info: ConsumerInfo = await js.consumer_info(stream, name)
    except NotFoundError as e:
        if e.err_code == STREAM_NOT_FOUND:
            raise
        return None
    return info


async def ensure_consumer(
    js: JetStreamContext, config: ConsumerConfig, stream: str = EVENTS_STREAM
) -> JetStreamContext.PullSubscription:
    """Create or update the durable, then bind to it.

    Where to start delivering can only be chosen when a consumer is created, so an existing
    durable keeps its own; only timing and limits are updated. Workers starting together
    may race to create it: the one that loses looks again and updates what the winner made.
    """
    name = config.durable_name
    assert name is not None
    for attempt in range(2):
        current = await _info(js, name, stream)
        if current is not None:
            config.deliver_policy = current.config.deliver_policy
            config.opt_start_seq = current.config.opt_start_seq
            config.opt_start_time = current.config.opt_start_time
        try:
            await js.add_consumer(stream, config=config)
            break
        except BadRequestError:
            if current is not None or attempt == 1:
                raise  # a configuration the server refuses, not a race
    return await js.pull_subscribe_bind(durable=name, stream=stream)


async def provision_consumers(js: JetStreamContext, layout: EventLayout | None = None) -> None:
    """Create the shared durables that do not exist, on every partition's stream; an
    existing one is left as it is (its workers set their own timing)."""
    layout = layout or EventLayout()
    for partition, stream in enumerate(layout.streams):
        existing = {c.name for c in await js.consumers_info(stream)}
        for spec in ALL_DURABLES:
            if spec.name in existing:
                continue
            config = spec.config(layout=layout, partition=partition)
            try:
                await js.add_consumer(stream, config=config)
            except BadRequestError as e:
                if e.err_code not in CONSUMER_EXISTS:
                    raise
