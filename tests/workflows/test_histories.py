"""A workflow's kept history reads on from where it ended and is always the whole log."""

from __future__ import annotations

from agency.contracts.events import MemberAdded, WorkflowCreated
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.services.workflows.engine.histories import WorkflowHistories


def _member(n: int) -> MemberAdded:
    return MemberAdded(member=f"m{n}", blueprint="b", agent_type="b", thread_id=f"th{n}")


async def test_a_kept_history_is_the_log_after_appends_by_anyone(bus: Bus, tenant: str) -> None:
    wf = "wf_" + new_id()
    histories = WorkflowHistories(bus.store, capacity=1)
    created = await bus.store.append(
        tenant, "workflow", wf, [WorkflowCreated(agency_id="a", name="x")], expected=Position()
    )
    first, position = await histories.read_positioned(tenant, "workflow", wf)
    assert [e.type for e in first] == ["workflow.created"] and position == created.position
    # Appended beside the kept history (another process), then through it.
    at = await bus.store.append(tenant, "workflow", wf, [_member(1)], expected=position)
    await histories.append(tenant, "workflow", wf, [_member(2)], expected=at.position)
    first.append(first[0])  # what a caller does with its list is not kept
    again, position = await histories.read_positioned(tenant, "workflow", wf)
    whole, whole_position = await bus.store.read_positioned(tenant, "workflow", wf)
    assert [e.stream_seq for e in again] == [e.stream_seq for e in whole]
    assert position == whole_position and [e.seq for e in again] == [1, 2, 3]
    # Another workflow pushes this one out (capacity 1): read again from the start, same log.
    await histories.read(tenant, "workflow", "wf_" + new_id())
    assert [e.stream_seq for e in await histories.read(tenant, "workflow", wf)] == [
        e.stream_seq for e in whole
    ]
