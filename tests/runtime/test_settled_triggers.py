"""Work a drive in this process already covers: a trigger whose event it settled, the
watch of a run it is driving right now, and the read of a thread whose state the
command's own append just left."""

from __future__ import annotations

from collections import Counter

import pytest

from agency.contracts.commands import WatchRun
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.commandbus import Defer, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leases import Leases
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.service import RuntimeService
from agency.services.runtime.settled import SettledThreads
from agency.services.runtime.watches import lease_key
from agency.services.threads.caches import ThreadCache
from tests.helpers import settled
from tests.runtime.conftest import make_system, running_agents


async def test_a_settled_trigger_needs_no_lease_and_a_later_one_does(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "settled-" + tenant
    llm.script(key, [ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "w"}}])])
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("approver")  # parks on an approval: nothing to drive
        await agents.invoke(thread, key)
        events = await agents.wait_for(thread, lambda es: settled(es)[-1].type == "run.paused")
        trigger = next(e for e in events if e.type == "request.accepted")
        parked_at = events[-1].stream_seq
        leases = await Leases(bus.js, owner="settled-test").open()
        async with OpenAIProvider(base_url=llm.base_url, api_key="fake") as provider:
            service = RuntimeService(bus, make_system(), provider, leases=leases)
            assert await service.drives.owned(tenant, thread, seen=trigger.stream_seq)
            # Another owner holds the thread from now on.
            other = await Leases(bus.js, owner="someone-else").open()
            held = await other.try_acquire(lease_key(tenant, thread))
            assert held is not None
            try:
                # The drive above saw the thread waiting after the trigger's event.
                assert await service.drives.owned(tenant, thread, seen=trigger.stream_seq)
                assert await service.drives.owned(tenant, thread, seen=parked_at)
                # An event past what was settled here needs the lease, as does any event
                # in a process that did not drive the thread.
                assert not await service.drives.owned(tenant, thread, seen=parked_at + 1)
                fresh = RuntimeService(bus, make_system(), provider, leases=leases)
                assert not await fresh.drives.owned(tenant, thread, seen=trigger.stream_seq)
            finally:
                await held.release()


def test_settled_threads_keep_the_furthest_mark_and_forget_the_oldest() -> None:
    marks = SettledThreads(kept=2)
    marks.mark("t", "a", 10)
    marks.mark("t", "a", 7)  # an older drive's mark never moves it back
    assert marks.covers("t", "a", 10)
    assert not marks.covers("t", "a", 11)
    assert not marks.covers("t", "a", 0)  # no event: nothing to cover
    marks.mark("t", "b", 3)
    marks.mark("t", "c", 3)
    assert not marks.covers("t", "a", 1)  # forgotten first: driven as before
    assert marks.covers("t", "b", 3) and marks.covers("t", "c", 2)
    assert not marks.covers("u", "b", 3)


async def test_the_watch_of_a_thread_driven_here_looks_again_later_without_reading_it(
    bus: Bus, llm: FakeLLMServer, tenant: str
) -> None:
    leases = await Leases(bus.js, owner="watch-test").open()
    async with OpenAIProvider(base_url=llm.base_url, api_key="fake") as provider:
        service = RuntimeService(bus, make_system(), provider, leases=leases)
        # No such thread: read, its run is over as far as the watch can tell.
        watch = WatchRun(agency_id="a", thread_id="no-such-thread", run_id="r")
        delivery = Delivery(subject="s", stream_seq=1, attempt=1)
        await service.watches.handle(tenant, watch, delivery)
        async with service.driver.lock(tenant, "no-such-thread"):
            with pytest.raises(Defer) as deferred:
                await service.watches.handle(tenant, watch, delivery)
    assert deferred.value.seconds == service.watches.settings.stall_after


async def test_an_invoke_is_driven_from_the_state_its_acceptance_left_with_one_read(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: Counter[str] = Counter()
    load = ThreadCache.load

    async def counted(
        self: ThreadCache, tenant_id: str, thread_id: str, *, from_leader: bool = False
    ) -> ThreadState:
        loads[thread_id] += 1
        return await load(self, tenant_id, thread_id, from_leader=from_leader)

    monkeypatch.setattr(ThreadCache, "load", counted)
    key = "one-read-" + tenant
    # A model that takes a moment, as models do: the run's watch and trigger arrive while
    # the thread is being driven.
    llm.script(key, [ScriptStep(content="done", delay_ms=500)])
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread()
        await agents.invoke(thread, key)
        await agents.wait_for(thread, lambda es: settled(es)[-1].type == "run.completed")
    # The invoke was decided on one read; its drive went on from the state the decision's
    # append left, and its trigger and watch found the thread driven here.
    assert loads[thread] == 1
