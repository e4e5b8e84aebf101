"""The durable consumer of the workflows controller.

Its filter spans three aggregates (workflow events, the run terminals of threads and
schedules' ticks); the worker passes over the other types by their header. It is created
on the service's first start delivering from the start of the log, so nothing written
before is missed.
"""

from __future__ import annotations

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
    (*WORKFLOW_TRIGGERS, *THREAD_TRIGGERS, "schedule.fired"),
    aggregates=("workflow", "thread", "schedule"),
)
