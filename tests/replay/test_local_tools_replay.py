"""A thread whose model called tools declared local replays and re-executes like any other:
the local calls' events are the runtime's own, so re-execution runs them again and finds
the same; the external call's result is an outside input taken from the record."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.replay.recorded import split_record
from agency.services.runtime.replay.reexecute import reexecute
from tests.replay.conftest import call, cli
from tests.replay.test_checkpoints import assert_checkpoint_follows_each_stop
from tests.runtime.conftest import Agents, running_agents
from tests.runtime.local_apps import build


@pytest.fixture
async def local_agents(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> AsyncIterator[Agents]:
    async with running_agents(bus, nats_url, tenant, llm, system=build()) as running:
        yield running


async def local_run(agents: Agents) -> tuple[str, list[RecordedEvent]]:
    key = "replay-local-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(call("define", word="agent"),)),
        ScriptStep(tool_calls=(
            call("lookup", word="agent"),
            call("define", word="actor"),
            call("explode", word="agent"),
        )),
        ScriptStep(content="All defined."),
    ])  # fmt: skip
    thread = await agents.thread("quick")
    await agents.invoke(thread, f"define {key}")
    return thread, await agents.wait_terminal(thread)


async def test_a_thread_with_local_tools_re_executes_to_the_same_events(
    local_agents: Agents, data_dir: Path
) -> None:
    thread, events = await local_run(local_agents)
    assert [e.type for e in events if e.type.startswith("tool.")].count("tool.requested") == 1
    record = split_record(local_agents.tenant, thread, events)
    produced = {(e.type, getattr(e.payload, "tool_name", None)) for e in record.produced}
    # The local calls' events are the runtime's; the external call's result came from outside.
    assert {("tool.output", "define"), ("tool.error", "explode")} <= produced
    assert ("tool.output", "lookup") not in produced

    report = await reexecute([events], build())
    assert report.same, report.comparisons[0].divergence
    assert report.compared == len(record.produced)

    ran = await cli(
        "replay",
        thread,
        "--re-execute",
        "--app",
        "tests.runtime.local_apps:system",
        "--data-dir",
        str(data_dir),
    )
    assert ran.status == 0, ran.out + ran.err
    assert ran.lines[-1] == f"same: {len(record.produced)} events compared"


async def test_replay_verifies_the_checkpoints_of_a_thread_with_local_tools(
    local_agents: Agents, data_dir: Path
) -> None:
    thread, events = await local_run(local_agents)
    assert_checkpoint_follows_each_stop(events)
    ran = await cli("replay", thread, "--data-dir", str(data_dir))
    assert ran.status == 0, ran.out + ran.err
    assert "✓" in ran.out and "✗" not in ran.out
