"""A command's decision is stored by the drive it starts: an approval (`hitl.resume`) with
the run's resumption, a request on an idle thread (`request.accepted`) with the run's start
and its first model call's opening, in one append caused by the command. When the worker
cannot drive the thread (another holds its lease), the decision is stored alone and driven
once the thread is free."""

from __future__ import annotations

from typing import Any

from agency.contracts.commands import ApproveToolCalls
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leases import Leases
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.replay.reexecute import reexecute
from agency.services.runtime.watches import lease_key
from tests.runtime.conftest import make_system, running_agents

GUARDED = (ScriptToolCall(name="lookup", arguments={"word": "w"}),)


def paused(events: list[Any]) -> bool:
    return any(e.type == "run.paused" for e in events)


def first(events: list[RecordedEvent], kind: str) -> RecordedEvent:
    return next(e for e in events if e.type == kind)


def batch_of(events: list[RecordedEvent], event: RecordedEvent) -> list[str]:
    """The types of the events appended together with `event` (they share one time)."""
    return [e.type for e in events if e.envelope.ts == event.envelope.ts]


def caused(events: list[RecordedEvent], event: RecordedEvent) -> list[str]:
    """The types of the events of `event`'s append that the command caused (its decision,
    under its key): the others are the runtime's own, as a re-execution tells them apart."""
    env = event.envelope
    return [
        e.type
        for e in events
        if e.envelope.ts == env.ts
        and e.envelope.causation_id is not None
        and e.envelope.idempotency_key is not None
    ]


async def test_an_approval_is_stored_with_the_runs_resumption_in_one_append(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "approval-append-" + tenant
    llm.script(key, [ScriptStep(tool_calls=GUARDED), ScriptStep(content="looked up")])
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("approver")
        await agents.invoke(thread, key)
        await agents.wait_for(thread, paused)
        await agents.approve(thread, True)
        events = await agents.wait_terminal(thread)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    decision = first(events, "hitl.resume")
    assert decision.envelope.causation_id is not None  # the approve command
    together = batch_of(events, decision)
    # The decision and what follows from it: the run resumed, the approved call sent.
    assert together[0] == "hitl.resume"
    assert {"run.resumed", "tool.requested"} <= set(together)
    assert caused(events, decision) == ["hitl.resume"]
    # And re-executing the thread decides the same: the runtime's own events are its own.
    assert (await reexecute([events], make_system())).same


async def test_a_request_on_an_idle_thread_is_stored_with_the_runs_start_in_one_append(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "invoke-append-" + tenant
    llm.script(key, [ScriptStep(content="first"), ScriptStep(content="second")])
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("worker")
        await agents.invoke(thread, key)
        await agents.wait_terminal(thread)
        await agents.invoke(thread, key)  # the thread is idle again: same path
        events = await agents.wait_terminal(thread, count=2)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"] * 2
    accepted = [e for e in events if e.type == "request.accepted"]
    assert len(accepted) == 2
    for request in accepted:
        assert request.envelope.causation_id is not None  # the invoke command
        together = batch_of(events, request)
        assert together[0] == "request.accepted"
        assert {"run.started", "model.started"} <= set(together)
        assert caused(events, request) == ["request.accepted"]
    assert (await reexecute([events], make_system())).same


async def test_an_approval_for_a_thread_leased_elsewhere_is_stored_alone_then_driven(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "approval-leased-" + tenant
    llm.script(key, [ScriptStep(tool_calls=GUARDED), ScriptStep(content="looked up")])
    other = await Leases(bus.js, owner="another-worker").open()
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("approver")
        await agents.invoke(thread, key)
        await agents.wait_for(thread, paused)
        lease = await other.try_acquire(lease_key(tenant, thread))
        assert lease is not None
        try:
            await bus.commands.send(
                tenant, ApproveToolCalls(agency_id=agents.agency, thread_id=thread, approved=True)
            )
            stored = await agents.wait_for(
                thread, lambda es: any(e.type == "hitl.resume" for e in es)
            )
            # Nobody drives the thread while another worker holds it.
            assert batch_of(stored, first(stored, "hitl.resume")) == ["hitl.resume"]
            assert "run.resumed" not in [e.type for e in stored]
        finally:
            await lease.release()
        events = await agents.wait_terminal(thread)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert first(events, "run.resumed").envelope.causation_id is None
    assert batch_of(events, first(events, "run.resumed"))[0] == "run.resumed"
