"""A child's run ends while the replica that answers the coordinator's reads is still
catching up (a NATS node restarted): the report still reaches the parent. A lagging
replica answers a direct get with what it has, nothing of a recent thread; a coordinator
that believed it would drop the report for good and leave the parent waiting."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from agency.contracts.events import (
    RunCompleted,
    SubagentCompleted,
    SubagentRequested,
    ThreadCreated,
)
from agency.contracts.events.base import ParentRef
from agency.contracts.ids import new_id
from agency.contracts.records import EventContext, Position, RecordedEvent
from agency.contracts.subjects import Aggregate
from agency.domain.child_naming import child_run_id, child_thread_id, child_token
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.ports import AggregateRead, DelegatingStore
from agency.services.subagents.relay import Relay
from agency.services.subagents.reports import Reports


class LaggingReplica(DelegatingStore):
    """The store as a replica just restarted answers it: the first read of each aggregate
    by direct get finds nothing; reads from the leader, and later ones, find it all."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.store = inner
        self.stale: list[str] = []

    def _lags(self, aggregate_id: str) -> bool:
        if aggregate_id in self.stale:
            return False
        self.stale.append(aggregate_id)
        return True

    async def first(
        self, tenant_id: str, aggregate: Aggregate, aggregate_id: str
    ) -> RecordedEvent | None:
        if self._lags(aggregate_id):
            return None
        return await self.store.first(tenant_id, aggregate, aggregate_id)

    async def fetch(self, read: AggregateRead) -> tuple[list[RecordedEvent], Position]:
        if not read.from_leader and self._lags(read.aggregate_id):
            return [], read.after or Position()
        return await super().fetch(read)


async def test_a_child_report_reaches_its_parent_through_a_lagging_replica(
    bus: Bus, tenant: str
) -> None:
    agency, parent, call, parent_run = "ag" + new_id().lower(), new_id(), "call_1", "run_p"
    child = child_thread_id(tenant, parent, call)
    child_run = child_run_id(child)
    await bus.store.append(
        tenant, "thread", parent,
        [
            ThreadCreated(agency_id=agency, agent_type="lead"),
            SubagentRequested(
                run_id=parent_run, tool_call_id=call, subagent_type="researcher",
                description="research",
            ),
        ],
        expected=Position(), context=EventContext(agency_id=agency, thread_id=parent),
    )  # fmt: skip
    ref = ParentRef(thread_id=parent, token=child_token(tenant, parent, call), tool_call_id=call)
    created = await bus.store.append(
        tenant, "thread", child,
        [ThreadCreated(agency_id=agency, agent_type="researcher", parent=ref)],
        expected=Position(), context=EventContext(agency_id=agency, thread_id=child),
    )  # fmt: skip
    ended = await bus.store.append(
        tenant, "thread", child,
        [RunCompleted(run_id=child_run, result="the report")],
        expected=created.position,
        context=EventContext(agency_id=agency, thread_id=child, run_id=child_run),
    )  # fmt: skip

    lagging = LaggingReplica(bus.store)
    seen = cast(Bus, SimpleNamespace(store=lagging, commands=bus.commands))
    await Reports(seen, Relay(seen)).report(ended.events[0])

    assert {child, parent} <= set(lagging.stale), "the replica never lagged"
    history = await bus.store.read(tenant, "thread", parent)
    reports = [e.payload for e in history if isinstance(e.payload, SubagentCompleted)]
    assert [(r.child_thread_id, r.outcome, r.report) for r in reports] == [
        (child, "completed", "the report")
    ]
