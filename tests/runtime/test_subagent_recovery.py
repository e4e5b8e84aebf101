"""A child created but never invoked (a crash between the two) is found and started; a child
whose spawn went through is started by it alone, and nothing is logged as amiss."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from agency.contracts.events import RequestAccepted
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.subagents import spawns
from agency.services.subagents.spawner import Spawner
from tests.runtime.conftest import Agents
from tests.runtime.test_subagents import children, task, terminal


async def manager_of_one_child(agents: Agents, key: str) -> str:
    """A new manager thread whose model, asked `key`, spawns one child (which reports) and
    then ends its turn."""
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"child {key}")]),
        ScriptStep(content="the child reported"),
    ])  # fmt: skip
    agents.llm.script(f"child {key}", [ScriptStep(content="child report")])
    return await agents.thread("manager")


async def test_a_child_whose_invoke_was_lost_is_started_once_it_exists(
    agents: Agents, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash point: the spawn stops right after `registry.create_thread`, as if the
    coordinator died there and its delivery was settled. Only the child's `thread.created`
    is left to bring the child to life."""
    finish = Spawner._finish_spawn
    lost: list[str] = []

    async def crash_after_create(self: Spawner, *args: Any, invoke_key: str) -> None:
        if invoke_key.startswith("spawn-invoke:"):
            lost.append(invoke_key)
            return
        await finish(self, *args, invoke_key=invoke_key)

    monkeypatch.setattr(Spawner, "_finish_spawn", crash_after_create)
    key = "lost-" + agents.tenant
    parent = await manager_of_one_child(agents, key)
    await agents.invoke(parent, key)

    events = await agents.wait_terminal(parent, timeout=30)

    assert lost, "the spawn never reached the crash point"
    assert terminal(events) == ["run.completed"]
    (child,) = children(events)
    child_events = await agents.events(child)
    assert terminal(child_events) == ["run.completed"]
    assert sum(isinstance(e.payload, RequestAccepted) for e in child_events) == 1


async def test_a_child_created_long_after_its_first_invoke_is_started(
    agents: Agents, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An outage held up the child's creation past the runtime's retries of its first
    invoke, which was dead-lettered although the spawn had sent it: the invoke is lost
    here as it went out, and the child appears later than the spawns trust a sent invoke
    (`TRUSTED_FOR`, none here). The child's `thread.created` starts it all the same."""
    finish = Spawner._finish_spawn
    lost: list[str] = []

    async def invoke_lost_once_sent(self: Spawner, *args: Any, invoke_key: str) -> bool:
        if invoke_key.startswith("spawn-invoke:"):
            lost.append(invoke_key)
            return True  # sent, as far as the spawn knows
        return bool(await finish(self, *args, invoke_key=invoke_key))

    monkeypatch.setattr(Spawner, "_finish_spawn", invoke_lost_once_sent)
    monkeypatch.setattr(spawns, "TRUSTED_FOR", 0.0)
    key = "late-create-" + agents.tenant
    parent = await manager_of_one_child(agents, key)
    await agents.invoke(parent, key)

    events = await agents.wait_terminal(parent, timeout=30)

    assert lost, "the spawn never sent its invoke"
    assert terminal(events) == ["run.completed"]
    (child,) = children(events)
    assert terminal(await agents.events(child)) == ["run.completed"]


async def test_a_spawned_child_is_started_by_its_spawn_alone_with_no_warning(
    agents: Agents,
) -> None:
    key = "spawned-" + agents.tenant
    parent = await manager_of_one_child(agents, key)
    with capture_logs() as logs:
        await agents.invoke(parent, key)
        events = await agents.wait_terminal(parent, timeout=30)

    assert terminal(events) == ["run.completed"]
    (child,) = children(events)
    assert sum(isinstance(e.payload, RequestAccepted) for e in await agents.events(child)) == 1
    assert [e for e in logs if "not invoked" in e["event"]] == []
    assert [e for e in logs if e["log_level"] in ("warning", "error", "critical")] == []


async def test_a_non_blocking_child_is_spawned_after_its_run_completed(
    agents: Agents, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-blocking call is answered at once, so the parent's run can complete before
    the coordinator reaches the request (a slow coordinator, a redelivery). The child
    was promised: it is spawned all the same and reports into a new run."""
    spawn = Spawner.spawn
    held: list[str] = []

    async def after_the_run(self: Spawner, event: RecordedEvent, request: Any) -> None:
        if not request.blocking:
            held.append(request.tool_call_id)
            await agents.wait_terminal(event.envelope.aggregate_id, timeout=30)
        await spawn(self, event, request)

    monkeypatch.setattr(Spawner, "spawn", after_the_run)
    key = "late-spawn-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"late job {key}", "background")]),
        ScriptStep(content="started it, carrying on"),
        ScriptStep(content="got the late result"),
    ])  # fmt: skip
    agents.llm.script(f"late job {key}", [ScriptStep(content="late result")])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)

    events = await agents.wait_terminal(parent, count=2, timeout=30)

    assert held, "the non-blocking spawn never went through the held path"
    assert terminal(events) == ["run.completed", "run.completed"]
    (child,) = children(events)
    assert terminal(await agents.events(child)) == ["run.completed"]
