"""A tick of an agent schedule run on a thread of its own (`ScheduleOptions.own_thread`,
LangGraph's stateless cron): a new thread of the agent's blueprint each tick, and a run of
it asked for with the schedule's message and run options. With `delete`, the run's
`request.accepted` says the thread goes when the run ends (`services/threads/run_end.py`,
as a stateless run's `on_completion="delete"`); with `keep` it stays.

The thread's id, its run's and the invoke's key are derived from the tick's event: a
redelivered tick creates nothing more (the thread exists: its creation is passed over)
and the runtime keeps one run per key.
"""

from __future__ import annotations

from contextlib import suppress

from agency.contracts.commands import InvokeThread
from agency.contracts.events import ChatMessage, RunOptions, ScheduleSet, ThreadCreated
from agency.contracts.ids import derived_id
from agency.domain.workflow_state import Member
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.errors import ConcurrencyError
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent

# The thread's metadata key naming the schedule (the LangGraph cron) that made it.
CRON_KEY = "cron_id"


def tick_thread_id(fired_event_id: str) -> str:
    return derived_id("thr_", "tick", fired_event_id)


async def run_on_own_thread(
    bus: Bus, fired: RecordedEvent, spec: ScheduleSet, member: Member
) -> str:
    """Create the tick's thread of `member`'s blueprint and ask for its run; its id."""
    env = fired.envelope
    tenant, schedule_id = env.tenant_id, env.aggregate_id
    thread_id = tick_thread_id(env.event_id)
    created = ThreadCreated(
        agency_id=spec.agency_id, agent_type=member.agent_type, request={CRON_KEY: schedule_id}
    )
    context = EventContext(agency_id=spec.agency_id, thread_id=thread_id, correlation_id=thread_id)
    with suppress(ConcurrencyError):  # created by this tick's earlier delivery
        await bus.store.append(
            tenant, "thread", thread_id, [created], expected=Position(), context=context
        )
    run = spec.options.run or RunOptions()
    await bus.commands.send(
        tenant,
        InvokeThread(
            agency_id=spec.agency_id,
            thread_id=thread_id,
            run_id=derived_id("run_", "tick", env.event_id),
            messages=(ChatMessage(role="user", content=spec.message),),
            webhook=run.webhook,
            pause_before_tools=run.pause_before_tools,
            pause_before_model=run.pause_before_model,
            pause_after_tools=run.pause_after_tools,
            delete_thread_on_end=spec.options.own_thread == "delete",
        ),
        idempotency_key=f"tick-invoke:{env.event_id}",
    )
    return thread_id
