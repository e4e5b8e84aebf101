"""Subagents: children spawned by `task`, reporting back; cancel cascades; timeouts."""

from __future__ import annotations

import asyncio
from typing import Any

from agency.contracts.events import SubagentCompleted, SubagentSpawned, ToolOutput
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.domain.thread_state import fold
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from tests.runtime.conftest import Agents


def task(description: str, kind: str = "worker", **extra: object) -> dict[str, object]:
    return {
        "name": "task",
        "arguments": {"description": description, "subagentType": kind, **extra},
    }


def kinds(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events]


def mentions(request: dict[str, Any], text: str) -> bool:
    """Whether a model request's messages hold `text`."""
    return any(text in str(m.get("content")) for m in request["messages"])


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "system")


def terminal(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events if e.type in RUN_TERMINAL_TYPES]


def children(events: list[RecordedEvent]) -> list[str]:
    return [e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)]


async def test_parallel_blocking_children_report_into_their_own_calls(agents: Agents) -> None:
    key = "par-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"child A {key}"), task(f"child B {key}")]),
        ScriptStep(content="both children reported"),
    ])  # fmt: skip
    agents.llm.script(f"child A {key}", [ScriptStep(content="report from A", delay_ms=200)])
    agents.llm.script(f"child B {key}", [ScriptStep(content="report from B")])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, timeout=30)

    assert terminal(events) == ["run.completed"]
    assert kinds(events).count("subagent.spawned") == 2
    assert "run.paused" in kinds(events) and "run.resumed" in kinds(events)
    reports = {e.payload.output for e in events if isinstance(e.payload, ToolOutput)}
    tool_messages = {
        e.payload.message.content for e in events
        if e.type == "message.appended" and e.payload.message.role == "tool"  # type: ignore[attr-defined]
    }  # fmt: skip
    assert tool_messages == {"report from A", "report from B"}
    assert not reports  # the reports are subagent results, not tool outputs
    # Every event of the tree carries the root's correlation id.
    for child in children(events):
        child_events = await agents.events(child)
        assert {e.envelope.correlation_id for e in child_events} == {parent}
        assert terminal(child_events) == ["run.completed"]
    assert {e.envelope.correlation_id for e in events} == {parent}
    # The registry follows each report: the parent's state, and its next model call, say
    # both children completed.
    registry = fold(agents.tenant, parent, events)
    assert [registry.child(c).status for c in children(events)] == ["completed"] * 2  # type: ignore[union-attr]
    (last,) = [r for r in agents.llm.requests if mentions(r, "report from A")]
    listed = [line for line in system_text(last).splitlines() if line.startswith("- ")]
    assert sorted(line.split()[1] for line in listed) == sorted(children(events))
    assert all(line.split()[-1] == "completed" for line in listed), listed


async def test_nested_children_three_levels_deep(agents: Agents) -> None:
    key = "nest-" + agents.tenant
    agents.llm.script(
        f"L1 {key}",
        [ScriptStep(tool_calls=[task(f"L2 {key}", "manager")]), ScriptStep(content="L1 done")],
    )
    agents.llm.script(
        f"L2 {key}",
        [ScriptStep(tool_calls=[task(f"L3 {key}", "manager")]), ScriptStep(content="L2 done")],
    )
    agents.llm.script(
        f"L3 {key}", [ScriptStep(tool_calls=[task(f"L4 {key}")]), ScriptStep(content="L3 done")]
    )
    agents.llm.script(f"L4 {key}", [ScriptStep(content="leaf done")])
    root = await agents.thread("manager")
    await agents.invoke(root, f"L1 {key}")
    events = await agents.wait_terminal(root, timeout=40)
    assert terminal(events) == ["run.completed"]
    depth, thread = 0, root
    while children(await agents.events(thread)):
        (thread,) = children(await agents.events(thread))
        depth += 1
        assert {e.envelope.correlation_id for e in await agents.events(thread)} == {root}
    assert depth == 3


async def test_child_error_and_timeout_are_reported_to_the_parent(agents: Agents) -> None:
    key = "fail-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"broken {key}"), task(f"slow {key}", timeoutMs=500)]),
        ScriptStep(content="handled both"),
    ])  # fmt: skip
    agents.llm.script(f"broken {key}", [ScriptStep(status=400, times=99)])
    agents.llm.script(f"slow {key}", [ScriptStep(content="too late", delay_ms=4000)])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, timeout=30)
    assert terminal(events) == ["run.completed"]
    outcomes = sorted(e.payload.outcome for e in events if isinstance(e.payload, SubagentCompleted))
    assert outcomes == ["error", "timeout"]
    slow = next(
        e.payload.child_thread_id for e in events
        if isinstance(e.payload, SubagentCompleted) and e.payload.outcome == "timeout"
    )  # fmt: skip
    slow_events = await agents.wait_terminal(slow, timeout=15)
    assert terminal(slow_events) == ["run.canceled"]


async def test_cancel_cascades_to_every_descendant(agents: Agents) -> None:
    key = "cascade-" + agents.tenant
    agents.llm.script(f"top {key}", [ScriptStep(tool_calls=[task(f"mid {key}", "manager")])])
    agents.llm.script(f"mid {key}", [ScriptStep(tool_calls=[task(f"low {key}")])])
    agents.llm.script(f"low {key}", [ScriptStep(content="never", delay_ms=20_000)])
    root = await agents.thread("manager")
    await agents.invoke(root, f"top {key}")

    async def tree_depth() -> list[str]:
        chain, thread = [root], root
        while children(await agents.events(thread)):
            (thread,) = children(await agents.events(thread))
            chain.append(thread)
        return chain

    for _ in range(200):
        chain = await tree_depth()
        if len(chain) == 3 and "model.started" in kinds(await agents.events(chain[2])):
            break
        await asyncio.sleep(0.05)
    assert len(chain) == 3
    await agents.cancel(root)
    for thread in chain:
        events = await agents.wait_terminal(thread, timeout=20)
        assert terminal(events) == ["run.canceled"], thread


async def test_non_blocking_child_result_arrives_as_a_queued_message(agents: Agents) -> None:
    key = "bg-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[task(f"background job {key}", "background")]),
        ScriptStep(content="started it, carrying on"),
        ScriptStep(content="got the background result"),
    ])  # fmt: skip
    agents.llm.script(
        f"background job {key}", [ScriptStep(content="background result", delay_ms=300)]
    )
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, count=2, timeout=30)
    first_done = next(e.seq for e in events if e.type == "run.completed")
    assert "run.paused" not in kinds(events)  # the parent never waited
    messages = [
        e.payload.message.content for e in events
        if e.type == "message.appended" and e.payload.message.role == "user" and e.seq > first_done  # type: ignore[attr-defined]
    ]  # fmt: skip
    assert (
        len(messages) == 1
        and "has returned the following result:\n\nbackground result" in messages[0]
    )
    assert terminal(events) == ["run.completed", "run.completed"]
