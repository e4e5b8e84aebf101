"""What the coordinator relays between a child and its parent besides reports: status
texts (`session.status`, `subagent.status_set` → `subagent.status`), a child's
`notify_parent` (queued to the parent as a message), a parent's `subagent_terminate`
(`runtime.terminate` for the child) and a child's termination (`subagent.terminated` on
the parent, once). Every write carries an idempotency key derived from what caused it."""

from __future__ import annotations

from collections import OrderedDict

from agency.contracts.commands import InvokeThread, TerminateThread
from agency.contracts.events import (
    ChatMessage,
    ParentRef,
    SubagentStatus,
    SubagentTerminated,
    SubagentTerminateRequested,
    ThreadCreated,
)
from agency.contracts.ids import derived_id
from agency.domain.child_naming import notice_message
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext, RecordedEvent
from agency.services.decide import decide_and_append
from agency.services.subagents.history import was_terminated
from agency.services.subagents.reads import read_finding

_PARENTS_KEPT = 100_000


def _created(history: list[RecordedEvent]) -> ThreadCreated | None:
    return next((e.payload for e in history if isinstance(e.payload, ThreadCreated)), None)


class Relay:
    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        self._parents: OrderedDict[tuple[str, str], ParentRef | None] = OrderedDict()

    async def parent_of(self, tenant: str, thread: str) -> ParentRef | None:
        """Where `thread` reports to (None for a root), read once per thread while it is
        among the last `_PARENTS_KEPT` asked about: a thread's parent never changes."""
        key = (tenant, thread)
        if key in self._parents:
            self._parents.move_to_end(key)
            return self._parents[key]
        first = await self._bus.store.first(tenant, "thread", thread)
        if first is not None and isinstance(first.payload, ThreadCreated):
            created: ThreadCreated | None = first.payload
        else:  # the first message is no event, or a lagging replica has none yet
            _, created = await read_finding(self._bus.store, tenant, thread, _created)
        self._parents[key] = created.parent if created else None
        while len(self._parents) > _PARENTS_KEPT:
            self._parents.popitem(last=False)
        return self._parents[key]

    async def status(self, event: RecordedEvent, status: str) -> None:
        env = event.envelope
        parent = await self.parent_of(env.tenant_id, env.aggregate_id)
        if parent is None:
            return
        update = SubagentStatus(child_thread_id=env.aggregate_id, status=status)
        await decide_and_append(
            self._bus.store, env.tenant_id, "thread", parent.thread_id,
            lambda history: (update,),
            context=EventContext(agency_id=env.agency_id, thread_id=parent.thread_id,
                                 correlation_id=env.correlation_id),
            idempotency_key=f"status:{env.event_id}",
        )  # fmt: skip

    async def terminate_child(
        self, event: RecordedEvent, asked: SubagentTerminateRequested
    ) -> None:
        """A parent's `subagent_terminate`: the child's runtime terminates it."""
        env = event.envelope
        await self._bus.commands.send(
            env.tenant_id,
            TerminateThread(
                agency_id=env.agency_id or "",
                thread_id=asked.child_thread_id,
                reason=asked.reason or f"terminated by its parent {env.aggregate_id}",
            ),
            idempotency_key=f"terminate:{asked.child_thread_id}:{asked.tool_call_id}",
        )

    async def terminated(self, event: RecordedEvent, reason: str) -> None:
        """A child was terminated: its parent's registry says so, once."""
        env = event.envelope
        parent = await self.parent_of(env.tenant_id, env.aggregate_id)
        if parent is None:
            return
        child = env.aggregate_id
        update = SubagentTerminated(child_thread_id=child, reason=reason)
        await decide_and_append(
            self._bus.store, env.tenant_id, "thread", parent.thread_id,
            lambda history: () if was_terminated(history, child) else (update,),
            context=EventContext(agency_id=env.agency_id, thread_id=parent.thread_id,
                                 correlation_id=env.correlation_id),
            idempotency_key=f"terminated:{child}",
        )  # fmt: skip

    async def notify(self, event: RecordedEvent, content: str) -> None:
        """A child escalates: queue its message to the parent, as a report is queued."""
        env = event.envelope
        parent = await self.parent_of(env.tenant_id, env.aggregate_id)
        if parent is None:
            return
        await self._bus.commands.send(
            env.tenant_id,
            InvokeThread(
                agency_id=env.agency_id or "",
                thread_id=parent.thread_id,
                run_id=derived_id("run_", "notify", env.event_id),
                messages=(
                    ChatMessage(role="user", content=notice_message(env.aggregate_id, content)),
                ),
            ),
            idempotency_key=f"notify:{env.event_id}",
        )
