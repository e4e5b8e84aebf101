"""The durable consumer of the workflows controller.

Its filter spans two aggregates (workflow events and the run terminals of threads) and
schedules, which the thread-only `DurableSpec` of `infra.jetstream.consumers` cannot say;
this spec is its subclass with explicit subjects. It is created on the service's first
start delivering from the start of the log, so nothing written before is missed.
"""

from __future__ import annotations

from dataclasses import dataclass

from nats.js.api import ConsumerConfig

from agency.contracts.subjects import events_of_type_filter
from agency.infra.jetstream.consumers import DurableSpec

WORKFLOW_TRIGGERS = (
    "workflow.started",
    "workflow.stopped",
    "channel.message_posted",
    "member.answered",
    "member.skipped",
)
THREAD_TRIGGERS = ("run.completed", "run.error", "run.canceled")


@dataclass(frozen=True, slots=True)
class MultiAggregateSpec(DurableSpec):
    subjects: tuple[str, ...] = ()

    def config(
        self, *, ack_wait: float = 30.0, max_deliver: int = 10, max_ack_pending: int = 1024
    ) -> ConsumerConfig:
        config = DurableSpec.config(
            self, ack_wait=ack_wait, max_deliver=max_deliver, max_ack_pending=max_ack_pending
        )
        config.filter_subject = None
        config.filter_subjects = list(self.subjects)
        return config


WORKFLOW_EVENTS = MultiAggregateSpec(
    "workflows",
    THREAD_TRIGGERS,
    subjects=(
        *(events_of_type_filter(t, "workflow") for t in WORKFLOW_TRIGGERS),
        *(events_of_type_filter(t) for t in THREAD_TRIGGERS),
        events_of_type_filter("schedule.fired", "schedule"),
    ),
)
