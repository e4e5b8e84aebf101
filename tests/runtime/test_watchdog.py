"""The watchdog resumes runs that stopped moving and ends those that cannot move."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest
import structlog

from agency.contracts.envelope import utc_now
from agency.contracts.events import BlueprintSpec, ToolCall
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.domain.thread_state import RunView, ThreadState
from agency.infra.jetstream.connection import Bus
from agency.services.agents.middleware import Middleware, MiddlewareContext, ModelPlan
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.watchdog import (
    Done,
    End,
    Later,
    Parked,
    Resume,
    WatchSettings,
    verdict,
)
from tests.helpers import assert_eventually
from tests.runtime.conftest import make_system, running_agents

SETTINGS = WatchSettings(stall_after=60, end_after=900)


def _thread(
    status: str, idle: float, reason: str | None = None, *, asks: bool = False
) -> ThreadState:
    now = utc_now()
    pending = (ToolCall(id="c1", name="lookup", arguments="{}"),) if asks else ()
    run = RunView(run_id="r1", status=status, reason=reason, hitl_pending=pending)  # type: ignore[arg-type]
    return ThreadState(
        tenant_id="t",
        thread_id="th",
        exists=True,
        runs=(run,),
        active_run_id="r1" if status in ("running", "paused") else None,
        last_event_at=now - timedelta(seconds=idle),
    )


@pytest.mark.parametrize(
    ("status", "idle", "reason", "asks", "leased", "expected"),
    [
        ("completed", 5000, None, False, False, Done()),
        ("running", 10, None, False, False, Later(50)),
        ("running", 5000, None, False, True, Later(60)),
        ("running", 120, None, False, False, Resume(60)),
        ("paused", 10, "hitl", True, False, Later(50)),
        ("paused", 90, "hitl", True, False, Parked()),
        ("paused", 90, "hitl", False, False, Resume(90)),
        ("paused", 90, "subagent", False, False, Resume(90)),
        ("paused", 400, "subagent", False, False, Resume(400)),
        ("paused", 5000, "subagent", False, False, Resume(900)),
        ("paused", 5000, "exhausted", False, False, Resume(900)),
    ],
    ids=[
        "ended",
        "recent",
        "leased",
        "stalled",
        "just-paused-for-a-person",
        "parked-on-a-person",
        "decided-not-resumed",
        "waiting-for-children-a-little",
        "waiting-for-children-longer",
        "waiting-for-children-long",
        "out-of-steps",
    ],
)
def test_verdicts(
    status: str, idle: float, reason: str | None, asks: bool, leased: bool, expected: object
) -> None:
    state = _thread(status, idle, reason, asks=asks)
    judged = verdict(state, "r1", utc_now(), leased, SETTINGS)
    if isinstance(expected, Later | Resume) and type(judged) is type(expected):
        assert judged.seconds == pytest.approx(expected.seconds, abs=1)
    else:
        assert judged == expected


def test_a_run_without_progress_for_end_after_is_ended() -> None:
    judged = verdict(_thread("running", 1000, None), "r1", utc_now(), False, SETTINGS)
    assert isinstance(judged, End)
    assert "no progress for 1000 s" in judged.reason


def test_a_queued_run_behind_an_active_one_is_left_to_that_run_s_watch() -> None:
    state = _thread("running", 5000)
    state = replace(state, runs=(*state.runs, RunView(run_id="r2")))
    assert verdict(state, "r2", utc_now(), False, SETTINGS) == Later(60)


@pytest.fixture
def quick_watchdog(monkeypatch: pytest.MonkeyPatch) -> None:
    """A watchdog that finds a run stalled after 0.5 s without progress, and ends it after 2 s."""
    monkeypatch.setenv("AGENCY_WATCHDOG_STALL", "0.5")
    monkeypatch.setenv("AGENCY_WATCHDOG_END", "2")


def script_a_lookup(llm: FakeLLMServer, key: str) -> None:
    """The model, asked `key`, calls `lookup` (answered, it would say "never")."""
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "w"}}]),
        ScriptStep(content="never"),
    ])  # fmt: skip


async def test_a_run_waiting_on_a_tool_nobody_runs_is_ended_as_stalled(
    bus: Bus,
    nats_url: str,
    tenant: str,
    llm: FakeLLMServer,
    quick_watchdog: None,
) -> None:
    key = "stalled-" + tenant
    script_a_lookup(llm, key)
    # No tools service: the lookup is requested and never answered.
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "runtime")
    ) as agents:
        thread = await agents.thread()
        run_id = await agents.invoke(thread, key)
        events = await agents.wait_terminal(thread, timeout=30)
    terminals = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert len(terminals) == 1
    assert terminals[0].run_id == run_id
    assert terminals[0].kind == "stalled"
    assert "waiting for its tool results" in terminals[0].error
    tool_answers = [
        e.payload.message for e in events
        if e.type == "message.appended" and e.payload.message.role == "tool"
    ]  # fmt: skip
    assert len(tool_answers) == 1


async def test_a_run_parked_on_a_person_is_watched_again_once_approved(
    bus: Bus,
    nats_url: str,
    tenant: str,
    llm: FakeLLMServer,
    quick_watchdog: None,
) -> None:
    """Parked, the run gives its watch up; the approval arms a new one, which ends the run
    when, approved, it waits on a tool nobody runs."""
    key = "parked-" + tenant
    script_a_lookup(llm, key)
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "runtime")
    ) as agents:
        thread = await agents.thread("approver")
        run_id = await agents.invoke(thread, key)
        with structlog.testing.capture_logs() as logs:

            async def given_up() -> None:
                assert any(e.get("run") == run_id and "given up" in e["event"] for e in logs)

            await assert_eventually(given_up, timeout=20)
        assert not any(e.type in RUN_TERMINAL_TYPES for e in await agents.events(thread))
        await agents.approve(thread, True)
        events = await agents.wait_terminal(thread, timeout=30)
    terminals = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert [(t.run_id, t.kind) for t in terminals] == [(run_id, "stalled")]


class Hangs(Middleware):
    """Middleware whose hook never returns: what no timeout of ours bounds."""

    name = "hangs"

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        await asyncio.Event().wait()


async def test_a_drive_that_hangs_is_stopped_and_its_run_ends(
    bus: Bus,
    nats_url: str,
    tenant: str,
    llm: FakeLLMServer,
    quick_watchdog: None,
) -> None:
    """The lease renews while the process lives; a drive stuck inside it must not keep the
    run open: it is stopped after `end_after` without an append, and the run ends."""
    system = make_system().use(Hangs(), ["hangs"])
    system.add_agent(BlueprintSpec(name="stuck", prompt="p", tags=("default", "hangs")))
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("stuck")
        run_id = await agents.invoke(thread, "hangs-" + tenant)
        events = await agents.wait_terminal(thread, timeout=60)
    ends = [e for e in events if e.type in RUN_TERMINAL_TYPES]
    assert [(e.payload.run_id, e.type) for e in ends] == [(run_id, "run.error")]
    assert ends[0].payload.kind in ("stalled", "trigger_exhausted")
    assert not [e for e in events if e.type == "model.started"]
