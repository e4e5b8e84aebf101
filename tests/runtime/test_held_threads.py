"""A command for a thread this worker holds is decided on the state it holds: without a
read first, or, when its drive stores it, checked against the log's last position (read
while the drive takes the thread's lease) before the model is asked; the append's expected
position catches a thread that moved meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agency.contracts.commands import ApproveToolCalls, CommandEnvelope
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.eventstore import EventStore
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.service import RuntimeService
from agency.services.threads.caches import ThreadCache
from tests.runtime.conftest import running_agents

GUARDED = (ScriptToolCall(name="lookup", arguments={"word": "w"}),)


def paused(events: list[Any]) -> bool:
    return any(e.type == "run.paused" for e in events)


def approvals_handled(monkeypatch: pytest.MonkeyPatch) -> asyncio.Queue[None]:
    """Each approval command the runtime has finished handling (its append included)."""
    done: asyncio.Queue[None] = asyncio.Queue()
    original = RuntimeService.handle_command

    async def handle(self: RuntimeService, envelope: CommandEnvelope, delivery: Any) -> None:
        try:
            await original(self, envelope, delivery)
        finally:
            if isinstance(envelope.payload, ApproveToolCalls):
                done.put_nowait(None)

    monkeypatch.setattr(RuntimeService, "handle_command", handle)
    return done


async def test_an_approval_of_a_run_this_worker_parked_rereads_nothing(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The held state is only checked against the log's last position (the drive that
    stores the approval asks the model before its append lands, so it must not start
    from a state that is behind): no event of the thread is read again."""
    key = "held-approve-" + tenant
    llm.script(key, [ScriptStep(tool_calls=GUARDED), ScriptStep(content="looked up")])
    read: list[int] = []
    positioned = EventStore.read_positioned

    async def counted(
        self: EventStore, tenant_id: str, aggregate: Any, aggregate_id: str, **kw: Any
    ) -> Any:
        newer, position = await positioned(self, tenant_id, aggregate, aggregate_id, **kw)
        if aggregate_id == thread:
            read.append(len(newer))
        return newer, position

    thread = ""
    monkeypatch.setattr(EventStore, "read_positioned", counted)
    handled = approvals_handled(monkeypatch)
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("approver")
        await agents.invoke(thread, key)
        await agents.wait_for(thread, paused)
        read.clear()
        await agents.approve(thread, True)
        await asyncio.wait_for(handled.get(), 20)
        # Decided and stored (the drive goes on from the state it left), nothing reread.
        assert read and set(read) == {0}
        events = await agents.wait_terminal(thread)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert "hitl.resume" in [e.type for e in events]


async def test_a_held_thread_that_moved_meanwhile_is_read_and_decided_again(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What this worker holds says the run awaits approval; the log says it was canceled
    since (as another worker would have done): the approval bound to it does nothing."""
    key = "held-moved-" + tenant
    llm.script(key, [ScriptStep(tool_calls=GUARDED)])
    snapshot: dict[str, ThreadState] = {}
    cached = ThreadCache.cached

    def stale(self: ThreadCache, tenant_id: str, thread_id: str) -> ThreadState | None:
        return snapshot.get(thread_id) or cached(self, tenant_id, thread_id)

    monkeypatch.setattr(ThreadCache, "cached", stale)
    handled = approvals_handled(monkeypatch)
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("approver")
        run_id = await agents.invoke(thread, key)
        await agents.wait_for(thread, paused)
        held = await ThreadCache(bus.store).load(tenant, thread)
        assert held.active_run is not None and held.active_run.hitl_pending
        await agents.cancel(thread)
        await agents.wait_terminal(thread)
        snapshot[thread] = held  # the worker's view from before the cancel
        await bus.commands.send(
            tenant,
            ApproveToolCalls(
                agency_id=agents.agency, thread_id=thread, approved=True, run_id=run_id
            ),
        )
        await asyncio.wait_for(handled.get(), 20)
        events = await agents.events(thread)
    kinds = [e.type for e in events]
    assert "hitl.resume" not in kinds and "run.resumed" not in kinds
    assert [k for k in kinds if k in RUN_TERMINAL_TYPES] == ["run.canceled"]
    # The drive found the log past what was held before it asked the model: one call, the
    # run's first.
    assert len([r for r in llm.requests if key in str(r["messages"])]) == 1
