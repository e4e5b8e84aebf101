"""A thread deleted when its run ends: LangGraph's stateless `on_completion="delete"`.

The run's `request.accepted` says so (`delete_thread_on_end`, from the invoke). A durable
consumer of run ends (`RUN_END_DELETIONS`, run by `agency serve webhooks`) deletes the
thread's tree as `DELETE /threads/{threadId}` does (`erasure.delete_tree`), at the request of
`run:<run id>`. Driven from the log: a run that ended while no worker was up is deleted
when one is, and a deletion stopped half-way is finished by the redelivery (a repeat is
harmless).

The run's request is looked for back from its end (`request_of`): a run's end reads the
thread's events since its request, not the thread's history.
"""

from __future__ import annotations

import asyncpg
import structlog

from agency.contracts.events import RequestAccepted, RunCanceled, RunCompleted, RunError, RunPaused
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import RecordedEvent
from agency.projections import queries
from agency.services.threads.erasure import delete_tree, deletion_of

log = structlog.get_logger(__name__)


REQUESTS = frozenset({"request.accepted"})


async def run_request(store: EventStore, event: RecordedEvent, run_id: str) -> RecordedEvent | None:
    """The `request.accepted` of `run_id` newest up to `event` (an event of the run's
    thread, the request itself perhaps), found back from `event` without reading the
    thread's older events."""

    def of_the_run(e: RecordedEvent) -> bool:
        return isinstance(e.payload, RequestAccepted) and e.payload.run_id == run_id

    if of_the_run(event):
        return event
    env = event.envelope
    return await store.newest(
        env.tenant_id, "thread", env.aggregate_id, before=event, types=REQUESTS, match=of_the_run
    )


async def request_of(bus: Bus, end: RecordedEvent, run_id: str) -> RequestAccepted | None:
    """What the run `run_id`, ended at `end`, was asked with (`run_request`)."""
    found = await run_request(bus.store, end, run_id)
    payload = found.payload if found is not None else None
    return payload if isinstance(payload, RequestAccepted) else None


def requested_by(run_id: str) -> str:
    """Who asked, as the tombstone records it."""
    return f"run:{run_id}"


class DeleteOnRunEnd:
    """The handler of `RUN_END_DELETIONS`."""

    def __init__(self, bus: Bus, pool: asyncpg.Pool) -> None:
        self._bus = bus
        self._pool = pool

    async def handle(self, event: RecordedEvent) -> None:
        payload = event.payload
        match payload:
            case RunCompleted() | RunError() | RunCanceled():
                pass
            case RunPaused(reason="hitl" | "breakpoint"):
                pass  # stopped at an interrupt: LangGraph's run is over there
            case _:
                return
        run_id = payload.run_id.split("~", 1)[0]
        env = event.envelope
        tenant, thread_id = env.tenant_id, env.aggregate_id
        if await deletion_of(self._bus, tenant, thread_id) is not None:
            return
        request = await request_of(self._bus, event, run_id)
        if request is None or not request.delete_thread_on_end:
            return
        async with self._pool.acquire() as conn:
            tree = await queries.tree_threads(conn, tenant, thread_id)
        root, threads = tree or (env.correlation_id or thread_id, [thread_id])
        await delete_tree(self._bus, tenant, root, [*threads, thread_id], requested_by(run_id))
        log.info("thread deleted at its run's end", tenant_id=tenant, thread_id=thread_id)
