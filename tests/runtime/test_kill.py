"""A service SIGKILLed mid-run and restarted: the run still ends in exactly one terminal
event, with no duplicate tool result and no gap in the thread's sequence."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from agency.contracts.commands import DelayRun, InvokeThread
from agency.contracts.envelope import utc_now
from agency.contracts.events import ChatMessage
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.helpers import settled
from tests.runtime.apps import build as build_app
from tests.runtime.conftest import running_agents

REPO = Path(__file__).resolve().parents[2]
APP = "tests.runtime.apps:system"


class ServiceProcess:
    """`agency serve NAME` as a child process that a test can SIGKILL."""

    def __init__(self, name: str, data_dir: Path, *extra: str) -> None:
        self._argv = [
            sys.executable, "-m", "agency.services.cli.main", "serve", name,
            "--data-dir", str(data_dir), "--app", APP, *extra,
        ]  # fmt: skip
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv, cwd=REPO, env=env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(self.proc.wait(), timeout=10)

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout=15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


@pytest.fixture
def data_dir(tmp_path: Path, nats_url: str, database_url: str, llm: FakeLLMServer) -> Path:
    write_endpoints(
        tmp_path,
        Endpoints(
            pid=os.getpid(),
            nats_url=nats_url,
            database_url=database_url,
            extra={"fake_llm_url": llm.base_url},
        ),
    )
    return tmp_path


@pytest.fixture
async def process_cleanup() -> AsyncIterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    yield started
    for process in started:
        await process.stop()


def assert_settled(events: list, call_ids: set[str]) -> None:  # type: ignore[type-arg]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    results = Counter(
        e.payload.tool_call_id for e in events if e.type in ("tool.output", "tool.error")
    )
    assert set(results) == call_ids
    assert all(n == 1 for n in results.values()), results


async def test_runtime_killed_mid_run_resumes_on_restart(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    key = "kill-runtime-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "one"}}]),
        ScriptStep(content="thinking slowly", delay_ms=2500),
        ScriptStep(content="finished after the crash"),
    ])  # fmt: skip
    runtime = ServiceProcess("runtime", data_dir, "--ack-wait", "2")
    process_cleanup.append(runtime)
    await runtime.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "tools"), system=build_app()
    ) as agents:
        thread = await agents.thread()
        await agents.invoke(thread, key)
        # The second model call is in flight (the tool result has come back): kill now.
        await agents.wait_for(
            thread, lambda es: [e.type for e in es].count("model.started") == 2, timeout=30
        )
        await runtime.kill()
        await runtime.start()
        events = await agents.wait_terminal(thread, timeout=40)
        await asyncio.sleep(1.0)  # anything a duplicate worker would add arrives by now
        events = await agents.events(thread)
    tool_calls = {e.payload.call.id for e in events if e.type == "tool.requested"}
    assert_settled(events, tool_calls)
    kinds = [e.type for e in events]
    # The call cut short by the kill was made again by the restarted worker.
    assert kinds.count("model.started") == 3 and kinds.count("model.completed") == 2


async def test_tools_service_killed_mid_call_gives_one_result(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    key = "kill-tools-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "slow_lookup", "arguments": {"word": "two", "seconds": 3}}]),
        ScriptStep(content="done"),
    ])  # fmt: skip
    tools = ServiceProcess("tools", data_dir, "--ack-wait", "2")
    process_cleanup.append(tools)
    await tools.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "runtime"), system=build_app()
    ) as agents:
        thread = await agents.thread()
        await agents.invoke(thread, key)
        await agents.wait_for(thread, lambda es: "tool.started" in [e.type for e in es], timeout=30)
        await tools.kill()
        await tools.start()
        events = await agents.wait_terminal(thread, timeout=60)
        await asyncio.sleep(1.0)
        events = await agents.events(thread)
    tool_calls = {e.payload.call.id for e in events if e.type == "tool.requested"}
    assert_settled(events, tool_calls)
    # The first attempt died with the service; the restarted one ran the call again.
    assert [e.type for e in events].count("tool.started") == 2


async def test_coordinator_killed_while_children_run_reports_each_child_once(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    key = "kill-coord-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[
            {"name": "task", "arguments": {"description": f"first {key}", "subagentType": "worker"}},
            {"name": "task", "arguments": {"description": f"second {key}", "subagentType": "worker"}},
        ]),
        ScriptStep(content="both reported"),
    ])  # fmt: skip
    llm.script(f"first {key}", [ScriptStep(content="first report", delay_ms=2500)])
    llm.script(f"second {key}", [ScriptStep(content="second report", delay_ms=2500)])
    coordinator = ServiceProcess("subagents", data_dir, "--ack-wait", "2")
    process_cleanup.append(coordinator)
    await coordinator.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "runtime", "tools"), system=build_app()
    ) as agents:
        parent = await agents.thread("manager")
        await agents.invoke(parent, key)
        await agents.wait_for(
            parent, lambda es: [e.type for e in es].count("subagent.spawned") == 2, timeout=30
        )
        await coordinator.kill()
        await asyncio.sleep(3.0)  # the children finish while nobody coordinates
        await coordinator.start()
        events = await agents.wait_terminal(parent, timeout=40)
        await asyncio.sleep(1.0)
        events = await agents.events(parent)
    reports = Counter(e.payload.child_thread_id for e in events if e.type == "subagent.completed")
    assert len(reports) == 2 and set(reports.values()) == {1}
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_subagent_timeout_survives_a_coordinator_restart(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    """The deadline is kept by the broker: it fires even though the coordinator that armed
    it died, and fires once."""
    key = "kill-deadline-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "task", "arguments": {
            "description": f"slow {key}", "subagentType": "worker", "timeoutMs": 1500}}]),
        ScriptStep(content="gave up on the child"),
    ])  # fmt: skip
    llm.script(f"slow {key}", [ScriptStep(content="far too late", delay_ms=90_000)])
    coordinator = ServiceProcess("subagents", data_dir, "--ack-wait", "2")
    process_cleanup.append(coordinator)
    await coordinator.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "runtime", "tools"), system=build_app()
    ) as agents:
        parent = await agents.thread("manager")
        await agents.invoke(parent, key)
        await agents.wait_for(
            parent, lambda es: "subagent.spawned" in [e.type for e in es], timeout=30
        )
        await coordinator.kill()
        await asyncio.sleep(2.0)  # the deadline passes while no coordinator runs
        await coordinator.start()
        events = await agents.wait_terminal(parent, timeout=40)
        await asyncio.sleep(1.0)
        events = await agents.events(parent)
    outcomes = [e.payload.outcome for e in events if e.type == "subagent.completed"]
    assert outcomes == ["timeout"]
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]


async def test_runtime_killed_inside_a_code_agent_resumes_its_handler(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    key = "kill-code-" + tenant
    llm.script(f"{key} first", [ScriptStep(content="one")])
    llm.script(f"{key} second", [ScriptStep(content="two", delay_ms=2500)])
    runtime = ServiceProcess("runtime", data_dir, "--ack-wait", "2")
    process_cleanup.append(runtime)
    await runtime.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "tools"), system=build_app()
    ) as agents:
        thread = await agents.thread("two_calls")
        await agents.invoke(thread, key)
        # The handler is in its second model call: kill now.
        await agents.wait_for(
            thread, lambda es: [e.type for e in es].count("model.started") == 2, timeout=30
        )
        await runtime.kill()
        await runtime.start()
        events = await agents.wait_terminal(thread, timeout=40)
        await asyncio.sleep(1.0)  # anything a duplicate worker would add arrives by now
        events = await agents.events(thread)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert settled(events)[-1].payload.result == "one / two"
    kinds = [e.type for e in events]
    # Nothing the record held was done again; the call cut short was made again.
    assert kinds.count("tool.started") == 1 and kinds.count("agent.state_set") == 1
    assert kinds.count("model.started") == 2 and kinds.count("model.completed") == 2


async def test_a_delayed_invoke_survives_a_runtime_restart(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, data_dir: Path,
    process_cleanup: list[ServiceProcess],
) -> None:  # fmt: skip
    """The delay is kept by the broker: the run, pending on the log, starts when it is due
    although the runtime that put it there died, and starts once."""
    key = "kill-delayed-" + tenant
    llm.script(key, [ScriptStep(content="started when due")])
    runtime = ServiceProcess("runtime", data_dir, "--ack-wait", "2")
    process_cleanup.append(runtime)
    await runtime.start()
    async with running_agents(
        bus, nats_url, tenant, llm, services=("registry", "tools"), system=build_app()
    ) as agents:
        thread = await agents.thread("worker")
        run_id, due = "run_" + key, utc_now() + timedelta(seconds=4)
        command = InvokeThread(
            agency_id=agents.agency, thread_id=thread, run_id=run_id,
            messages=(ChatMessage(role="user", content=key),), not_before=due,
        )  # fmt: skip
        delay = DelayRun(agency_id=agents.agency, thread_id=thread, run_id=run_id, not_before=due)
        await bus.commands.send(tenant, command)
        await bus.commands.send(tenant, delay)
        await agents.wait_for(thread, lambda es: "run.delayed" in [e.type for e in es])
        await runtime.kill()
        await runtime.start()
        events = await agents.wait_terminal(thread, timeout=40)
        await asyncio.sleep(1.0)  # anything a duplicate worker would add arrives by now
        events = await agents.events(thread)
    kinds = [e.type for e in events]
    assert kinds.count("request.accepted") == 1 and kinds.count("run.started") == 1
    (started,) = [e for e in events if e.type == "run.started"]
    assert started.envelope.ts >= due
    assert settled(events)[-1].payload.result == "started when due"
