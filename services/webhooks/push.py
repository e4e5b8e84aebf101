"""The log's side of A2A push notifications: each event that changes a task's status (or
gives it its artifact) becomes one delivery per push config of the task, durable
`push-notifications`.

A task is a run of a thread (`services/a2a/tasks.py`); a config matches the events of its
task written since it was configured (`push_configs`, the agency's read model). The body is
what a stream of the task carries for the event, a `StreamResponse` (`statusUpdate`, or
`artifactUpdate` then `statusUpdate` as a run completes), folded from the run's events up
to the event: from its `request.accepted`, found back from the event
(`run_end.run_request`), not from the start of the thread. As for subscriptions
(`fanout.py`), the event is acknowledged only once its deliveries are stored, and the
same event read again makes the same deliveries; they are attempted by the same
dispatcher, on the same schedule (`dispatch.py`).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agency.infra.jetstream.consumers import DurableSpec
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import RecordedEvent
from agency.services.a2a.tasks import ThreadTasks, task_id
from agency.services.a2a.wire import ENCODER
from agency.services.threads.run_end import run_request
from agency.services.webhooks.deliveries import Deliveries

log = structlog.get_logger(__name__)

# The thread's events that change a task's status (`ThreadTasks.apply`).
STATUS_TYPES = (
    "request.accepted",
    "request.rejected",
    "run.started",
    "run.paused",
    "run.resumed",
    "hitl.resume",
    "run.completed",
    "run.error",
    "run.canceled",
)
PUSHED_EVENTS = DurableSpec("push-notifications", STATUS_TYPES)


class PushFanout:
    def __init__(self, deliveries: Deliveries, store: EventStore, made: Callable[[], None]) -> None:
        self._deliveries = deliveries
        self._store = store
        self._made = made

    async def handle(self, event: RecordedEvent) -> None:
        env = event.envelope
        run_id = getattr(event.payload, "run_id", None)
        if env.aggregate != "thread" or env.agency_id is None or not isinstance(run_id, str):
            return
        task = task_id(env.aggregate_id, run_id)
        if not await self._deliveries.push_configs(env.tenant_id, env.agency_id, task, env.ts):
            return
        bodies = await self._bodies(event, run_id)
        if not bodies:
            return
        count = await self._deliveries.enqueue_push(
            env.tenant_id, env.agency_id, task, env.event_id, env.ts, bodies
        )
        if count:
            log.info("push notifications made", task_id=task, count=count)
            self._made()

    async def _bodies(self, event: RecordedEvent, run_id: str) -> list[bytes]:
        """What a stream of the task carries for `event`, folded from its run's request on
        (a task is made of its run's events only)."""
        env = event.envelope
        request = await run_request(self._store, event, run_id)
        if request is None:
            return []
        tasks = ThreadTasks(env.aggregate_id)
        since = await self._store.read(
            env.tenant_id, "thread", env.aggregate_id, after=request.position
        )
        for recorded in [request, *since]:
            changes = tasks.apply(recorded)
            if recorded.envelope.event_id != env.event_id:
                continue
            return [
                ENCODER.encode(
                    c.task.artifact_event() if c.kind == "artifact" else c.task.status_event()
                )
                for c in changes
                if c.task.run_id == run_id
            ]
        return []
