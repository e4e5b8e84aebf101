"""One tenant's flood never keeps another tenant's run from starting and completing.

Asserted as ordering and progress, never as durations: tenant A's runs are held for
approval and never end by themselves, so if B's run had to wait for A's capacity to free
up it would never complete.
"""

from __future__ import annotations

import asyncio

import pytest

from agency.contracts.commands import CreateAgency
from agency.contracts.events import RequestAccepted, RequestRejected, RunCompleted, RunStarted
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.tenancy.admission import ADMISSION_LIMIT, AdmissionSettings, RunShares
from agency.services.tenancy.fairness import (
    ACTIVE_RUN_LIMIT,
    PARKED_RUN_LIMIT,
    FairnessLimits,
    TenantLoad,
    refuse_invoke,
)
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents, running_agents

FLOOD_THREADS = 50
RUNS_PER_THREAD = 10  # 500 invokes
ACTIVE_LIMIT = 20
# A guard against a hang, not a measured duration: B's run needs one model call.
HANG_GUARD = 60.0


@pytest.mark.slow
async def test_a_flood_of_500_invokes_by_one_tenant_leaves_anothers_run_to_start_and_complete(
    bus: Bus, nats_url: str, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_TENANT_MAX_ACTIVE_RUNS", str(ACTIVE_LIMIT))
    monkeypatch.setenv("AGENCY_TENANT_MAX_PARKED_RUNS", str(ACTIVE_LIMIT))
    tenant_a, tenant_b = "ta" + new_id().lower(), "tb" + new_id().lower()
    flood_key, calm_key = "flood-" + tenant_a, "calm-" + tenant_b
    # Each of A's runs asks for a tool held for approval, and nobody approves: once
    # admitted, a run of A stays active, then parked, for the rest of the test.
    llm.script(flood_key, [ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "x"}}])])
    llm.script(calm_key, [ScriptStep(content="calm answer")])
    async with running_agents(bus, nats_url, tenant_a, llm) as a:
        b = await _agents(bus, tenant_b, llm)
        flood_threads = await asyncio.gather(*(a.thread("approver") for _ in range(FLOOD_THREADS)))
        calm_thread = await b.thread()
        # Every one of A's 500 invokes is on the bus (each send is acknowledged) before B's.
        await asyncio.gather(
            *(
                a.invoke(t, f"{flood_key} {i}")
                for t in flood_threads
                for i in range(RUNS_PER_THREAD)
            )
        )
        run_id = await b.invoke(calm_thread, calm_key)

        calm = await b.wait_terminal(calm_thread, timeout=HANG_GUARD)
        started = [e for e in calm if isinstance(e.payload, RunStarted)]
        assert [e.payload.run_id for e in started] == [run_id]
        assert [e.type for e in calm if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
        assert not any(isinstance(e.payload, RequestRejected) for e in calm)

        async def every_invoke_of_a_decided() -> dict[str, list[RecordedEvent]]:
            decided: dict[str, list[RecordedEvent]] = {}
            for thread in flood_threads:
                decided[thread] = [
                    e
                    for e in await a.events(thread)
                    if isinstance(e.payload, RequestAccepted | RequestRejected)
                ]
            assert sum(len(d) for d in decided.values()) == FLOOD_THREADS * RUNS_PER_THREAD
            return decided

        decided = await assert_eventually(every_invoke_of_a_decided, timeout=HANG_GUARD)
        a_events = {thread: await a.events(thread) for thread in flood_threads}

    flat = [e for events in decided.values() for e in events]
    accepted = [e for e in flat if isinstance(e.payload, RequestAccepted)]
    rejected = [e.payload for e in flat if isinstance(e.payload, RequestRejected)]
    # A got at most its share: one runtime process never admits beyond the limits (a
    # reservation whose append lost a race may briefly hold a slot, so it can be fewer).
    # Each invoke is admitted under both, at work and parked; a run admitted under the
    # parked limit may park past it, so A holds under twice the limit in all. The rest of
    # its flood was refused at once with the reason, never left waiting.
    assert 0 < len(accepted) < 2 * ACTIVE_LIMIT
    assert len(rejected) == FLOOD_THREADS * RUNS_PER_THREAD - len(accepted)
    # Or past its share of the runs in progress, which A's runs at work fill too.
    reasons = (ACTIVE_RUN_LIMIT, PARKED_RUN_LIMIT, ADMISSION_LIMIT)
    wrong = [r.reason for r in rejected if not r.reason.startswith(reasons)]
    assert not wrong, wrong[:3]
    # Progress, not waiting: none of A's admitted runs ever ended, so B's run started and
    # completed while A's flood held everything it was given; and A's flood was in force
    # first (its first command was decided before B's run started).
    assert not [e for es in a_events.values() for e in es if e.type in RUN_TERMINAL_TYPES]
    completed = next(e for e in calm if isinstance(e.payload, RunCompleted))
    assert min(e.stream_seq for e in accepted) < started[0].stream_seq < completed.stream_seq


async def test_runs_parked_on_approvals_leave_the_active_limit_and_fill_a_parked_one(
    bus: Bus, nats_url: str, llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run at work at a time, two parked: a tenant whose run waits on an approval
    starts another, and a third waiting run is refused with its reason until one of the
    waiting ones is answered."""
    monkeypatch.setenv("AGENCY_TENANT_MAX_ACTIVE_RUNS", "1")
    monkeypatch.setenv("AGENCY_TENANT_MAX_PARKED_RUNS", "2")
    tenant = "tp" + new_id().lower()
    key = "parks-" + tenant
    llm.script(
        key,
        [
            ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "x"}}], times=3),
            ScriptStep(content="looked up"),
        ],
    )
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        threads = [await agents.thread("approver") for _ in range(3)]
        for thread in threads[:2]:
            await agents.invoke(thread, key)
            await agents.wait_for(thread, lambda es: any(e.type == "run.paused" for e in es))

        await agents.invoke(threads[2], key)
        events = await agents.wait_for(
            threads[2], lambda es: any(isinstance(e.payload, RequestRejected) for e in es)
        )
        [rejected] = [e.payload for e in events if isinstance(e.payload, RequestRejected)]
        assert rejected.reason.startswith(PARKED_RUN_LIMIT), rejected.reason
        assert "2 runs waiting on an answer" in rejected.reason

        await agents.approve(threads[0], approved=True)
        ended = await agents.wait_terminal(threads[0])
        assert [e.type for e in ended if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
        run_id = await agents.invoke(threads[2], key)
        events = await agents.wait_for(
            threads[2], lambda es: any(e.type == "run.paused" for e in es)
        )
        accepted = [e.payload for e in events if isinstance(e.payload, RequestAccepted)]
        assert [a.run_id for a in accepted] == [run_id]


def test_a_tenants_load_counts_reserved_admitted_and_ended_runs_once() -> None:
    load = TenantLoad()
    load.reserve("t1", "r1")
    load.reserve("t1", "r2")
    assert load.active("t1") == 2 and load.active("t2") == 0
    load.admitted("t1", "r1")  # stored: counted once, reserved or seen in the log
    load.admitted("t1", "r1")
    assert load.active("t1") == 2
    load.release("t1", "r2")  # its append failed
    assert load.active("t1") == 1
    load.ended("t1", "r1")
    assert load.active("t1") == 0


async def _agents(bus: Bus, tenant: str, llm: FakeLLMServer) -> Agents:
    agency = new_id()
    await bus.commands.send(tenant, CreateAgency(agency_id=agency, name="calm"))

    async def exists() -> None:
        assert await bus.store.read(tenant, "agency", agency)

    await assert_eventually(exists)
    return Agents(bus=bus, tenant=tenant, agency=agency, llm=llm)


def test_a_parked_run_leaves_the_runs_in_progress_and_the_active_ones_until_it_resumes() -> None:
    shares = RunShares(AdmissionSettings(runs_initial_limit=2, runs_min_limit=2, runs_max_limit=2))
    load = TenantLoad(shares=shares)
    for run in ("r1", "r2"):
        load.admitted("t1", run)
    assert load.over_share("t1") is not None  # 2 of 2 runs in progress
    load.paused("t1", "r1")
    load.paused("t1", "r2")
    load.paused("t1", "r2")  # seen again: counted once
    assert shares.in_progress == 0 and load.over_share("t1") is None
    assert (load.active("t1"), load.parked("t1")) == (0, 2)  # waiting on someone
    load.resumed("t1", "r1")
    assert shares.in_progress == 1 and (load.active("t1"), load.parked("t1")) == (1, 1)
    load.ended("t1", "r1")
    load.resumed("t1", "r1")  # a late resume of an ended run is not counted again
    assert shares.in_progress == 0 and (load.active("t1"), load.parked("t1")) == (0, 1)
    load.ended("t1", "r2")  # canceled while parked
    assert (load.active("t1"), load.parked("t1")) == (0, 0)
    load.paused("t1", "before-start")  # admitted before this process started: not counted
    assert load.parked("t1") == 0


def test_the_tenant_limits_refuse_past_the_active_runs_or_past_the_parked_ones() -> None:
    limits = FairnessLimits(max_active_runs=2, max_parked_runs=3)
    assert refuse_invoke(1, limits, parked_runs=2) is None
    assert ACTIVE_RUN_LIMIT in (refuse_invoke(2, limits, parked_runs=0) or "")
    parked = refuse_invoke(0, limits, parked_runs=3) or ""
    assert parked.startswith(PARKED_RUN_LIMIT) and "retry in 30 s" in parked, parked
    assert refuse_invoke(5, FairnessLimits(max_active_runs=0, max_parked_runs=0), 5) is None


def test_a_tenants_load_survives_a_replay_and_ends_of_runs_it_never_saw() -> None:
    """Events seen twice (the deciding step and the log, or a replay) count once; the end
    of a run accepted before the process started counts nothing; parked runs stay admitted,
    as parked."""
    shares = RunShares(AdmissionSettings())
    load = TenantLoad(shares=shares)
    load.ended("t1", "before-start")  # accepted before this process started
    for _ in range(2):  # the log read twice
        for n in range(3):
            load.admitted("t1", f"r{n}")
        load.paused("t1", "r0")
    assert (load.active("t1"), load.parked("t1")) == (2, 1) and shares.in_progress == 2
    load.reserve("t1", "r1")  # a repeated command for a stored run
    assert load.active("t1") == 2
    for n in range(3):
        load.ended("t1", f"r{n}")
        load.ended("t1", f"r{n}")
    assert (load.active("t1"), load.parked("t1")) == (0, 0) and shares.in_progress == 0
    assert shares.held == {} and load.over_share("t1") is None
