"""The durable consumer of the workflows controller.

Its filter spans two aggregates (workflow events and the run terminals of threads) and
schedules: the spec names its subjects. It is created on the service's first
start delivering from the start of the log, so nothing written before is missed.
"""

from __future__ import annotations

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


WORKFLOW_EVENTS = DurableSpec(
    "workflows",
    THREAD_TRIGGERS,
    subjects=(
        *(events_of_type_filter(t, "workflow") for t in WORKFLOW_TRIGGERS),
        *(events_of_type_filter(t) for t in THREAD_TRIGGERS),
        events_of_type_filter("schedule.fired", "schedule"),
    ),
)
