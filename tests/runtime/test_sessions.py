"""Resumable children, attachments, dual-AI sessions and handoffs."""

from __future__ import annotations

from agency.contracts.events import (
    BlueprintSpec,
    SessionToolBinding,
    SideConfig,
    SubagentCompleted,
    SubagentSpawned,
    ToolError,
)
from agency.contracts.events.blueprint import BlueprintConfig
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from tests.runtime.conftest import Agents


def kinds(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events]


def terminal(events: list[RecordedEvent]) -> list[RecordedEvent]:
    return [e for e in events if e.type in RUN_TERMINAL_TYPES]


def files(events: list[RecordedEvent]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in events:
        if e.type == "file.written":
            out[e.payload.path] = e.payload.content  # type: ignore[attr-defined]
    return out


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


async def test_resumable_child_is_created_then_messaged_twice(agents: Agents) -> None:
    key = "resume-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[call("subagent_create", name="scribe", subagentType="helper", message=f"first {key}-child")]),
        ScriptStep(tool_calls=[call("subagent_create", name="second", subagentType="helper", message="again")]),
        ScriptStep(tool_calls=[call("subagent_message", reference="REF", message="second message")]),
        ScriptStep(content="done with the helper"),
    ])  # fmt: skip
    # The first answer takes a while: the test learns the child's reference meanwhile and
    # scripts the parent's later steps with it.
    agents.llm.script(f"{key}-child", [
        ScriptStep(content="answer one", delay_ms=1000), ScriptStep(content="answer two"),
        ScriptStep(content="answer three"),
    ])  # fmt: skip
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_for(parent, lambda es: "subagent.spawned" in kinds(es))
    child = next(
        e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)
    )
    # The scripted reference is only known now: message the real child.
    agents.llm.script(key, [
        ScriptStep(tool_calls=[call("subagent_create", name="scribe", subagentType="helper", message=f"first {key}-child")]),
        ScriptStep(tool_calls=[call("subagent_create", name="second", subagentType="helper", message="again")]),
        ScriptStep(tool_calls=[call("subagent_message", reference=child, message="second message")]),
        ScriptStep(tool_calls=[call("subagent_message", reference=child, message="third message")]),
        ScriptStep(content="done with the helper"),
    ])  # fmt: skip
    events = await agents.wait_terminal(parent, timeout=40)
    assert [e.type for e in terminal(events)] == ["run.completed"]
    errors = [e.payload.error for e in events if isinstance(e.payload, ToolError)]
    assert (
        len(errors) == 1
        and "maxInstances of 1 reached for helper" in errors[0]
        and child in errors[0]
    )
    reports = [e.payload.report for e in events if isinstance(e.payload, SubagentCompleted)]
    assert reports == ["answer one", "answer two", "answer three"]
    child_events = await agents.events(child)
    assert [e.type for e in terminal(child_events)] == ["run.completed"] * 3
    assert len([e for e in events if e.type == "subagent.spawned"]) == 1


async def test_attachments_are_copied_to_the_child_and_back(agents: Agents) -> None:
    key = "attach-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=[call("write_file", path="brief.md", content="the brief")]),
        ScriptStep(tool_calls=[call("task", description=f"use the brief {key}-child", subagentType="worker", attachments=["brief.md"])]),
        ScriptStep(content="thanks"),
    ])  # fmt: skip
    agents.llm.script(f"{key}-child", [
        ScriptStep(tool_calls=[call("read_file", path="brief.md")]),
        ScriptStep(tool_calls=[call("write_file", path="out/result.md", content="the result")]),
        ScriptStep(content="wrote out/result.md"),
    ])  # fmt: skip
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, timeout=30)
    child = next(
        e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)
    )
    child_files = files(await agents.events(child))
    assert child_files["brief.md"] == "the brief"
    parent_files = files(events)
    assert parent_files[f"subagents/{child}/out/result.md"] == "the result"
    report = next(e.payload for e in events if isinstance(e.payload, SubagentCompleted))
    assert report.attachments == (f"subagents/{child}/out/result.md",)
    assert f"subagents/{child}/out/result.md" in report.report


def pair(name: str, key: str, a: SideConfig, b: SideConfig, turns: int | None = 6) -> BlueprintSpec:
    return BlueprintSpec(
        name=name,
        type="dual_ai",
        tags=("default",),
        side_a=a,
        side_b=b,
        max_session_turns=turns,
        expose_as_tool=True,
        tool_description=f"a reviewed session {key}",
    )


async def run_pair(agents: Agents, blueprint: BlueprintSpec, task: str) -> list[RecordedEvent]:
    await agents.save_blueprint(blueprint)
    thread = await agents.thread(blueprint.name)
    await agents.invoke(thread, task)
    return await agents.wait_terminal(thread, timeout=30)


async def test_dual_ai_session_ends_when_a_side_calls_session_stop(agents: Agents) -> None:
    key = agents.tenant[-10:]
    a = SideConfig(prompt=f"A-{key} write", label="writer")
    b = SideConfig(prompt=f"B-{key} review", label="reviewer",
                   session_stop=SessionToolBinding(name="approve", message_property="summary"))  # fmt: skip
    agents.llm.script(f"A-{key}", [ScriptStep(content="draft 1"), ScriptStep(content="draft 2")])
    agents.llm.script(f"B-{key}", [
        ScriptStep(content="needs work"),
        ScriptStep(tool_calls=[call("approve", summary="approved draft 2")]),
    ])  # fmt: skip
    events = await run_pair(agents, pair(f"pair-{key}", key, a, b), "write a line")
    (end,) = terminal(events)
    assert end.type == "run.completed" and end.payload.result == "approved draft 2"  # type: ignore[attr-defined]
    assert [e.payload.side for e in events if e.type == "session.turn"] == ["A", "B", "A", "B"]  # type: ignore[attr-defined]
    spoken = [
        (e.payload.message.name, e.payload.message.content)
        for e in events  # type: ignore[attr-defined]
        if e.type == "message.appended" and e.payload.message.role == "assistant"
    ]  # type: ignore[attr-defined]
    assert spoken[:3] == [("A", "draft 1"), ("B", "needs work"), ("A", "draft 2")]
    # Each side sees itself as the assistant and the other as the user.
    b_request = next(r for r in agents.llm.requests if f"B-{key}" in str(r["messages"][0]))
    assert [m["role"] for m in b_request["messages"]] == ["system", "user", "user"]


async def test_dual_ai_session_fails_by_session_fail(agents: Agents) -> None:
    key = agents.tenant[-10:]
    a = SideConfig(
        prompt=f"A-{key}",
        session_fail=SessionToolBinding(name="give_up", message_property="reason"),
    )
    b = SideConfig(prompt=f"B-{key}")
    agents.llm.script(
        f"A-{key}", [ScriptStep(tool_calls=[call("give_up", reason="impossible task")])]
    )
    (end,) = terminal(await run_pair(agents, pair(f"fail-{key}", key, a, b), "try"))
    assert end.type == "run.error" and end.payload.error == "impossible task"  # type: ignore[attr-defined]
    assert end.payload.kind == "session_fail"  # type: ignore[attr-defined]


async def test_dual_ai_turn_ends_by_stop_tool_and_session_by_turn_cap(agents: Agents) -> None:
    key = agents.tenant[-10:]
    a = SideConfig(prompt=f"A-{key}", stop_on_response=False, stop_tool="pass_turn")
    b = SideConfig(prompt=f"B-{key}")
    agents.llm.script(f"A-{key}", [
        ScriptStep(content="thinking aloud"),
        ScriptStep(tool_calls=[call("pass_turn", message="over to you")]),
    ])  # fmt: skip
    agents.llm.script(f"B-{key}", [ScriptStep(content="final words")])
    events = await run_pair(agents, pair(f"turns-{key}", key, a, b, turns=2), "talk")
    (end,) = terminal(events)
    # No side can stop the session by a tool: the cap ends it, naturally, with the last words.
    assert end.type == "run.completed" and end.payload.result == "final words"  # type: ignore[attr-defined]
    assert kinds(events).count("model.completed") == 3


async def test_dual_ai_side_max_steps_then_turn_cap_with_unused_stop_is_an_error(
    agents: Agents,
) -> None:
    key = agents.tenant[-10:]
    a = SideConfig(prompt=f"A-{key}", stop_on_response=False, max_steps=2)
    b = SideConfig(prompt=f"B-{key}", session_stop="finish")
    agents.llm.script(
        f"A-{key}",
        [ScriptStep(content="one"), ScriptStep(content="two"), ScriptStep(content="three")],
    )
    agents.llm.script(f"B-{key}", [ScriptStep(content="not yet"), ScriptStep(content="still not")])
    events = await run_pair(agents, pair(f"cap-{key}", key, a, b, turns=3), "go")
    (end,) = terminal(events)
    assert end.type == "run.error" and end.payload.kind == "max_session_turns"  # type: ignore[attr-defined]
    sides = [
        e.payload.message.name
        for e in events  # type: ignore[attr-defined]
        if e.type == "message.appended" and e.payload.message.role == "assistant"
    ]  # type: ignore[attr-defined]
    assert sides == ["A", "A", "B", "A", "A"]


async def test_exposed_dual_ai_agent_runs_as_a_subagent_and_publishes_status(
    agents: Agents,
) -> None:
    key = agents.tenant[-10:]
    a = SideConfig(
        prompt=f"A-{key}",
        session_status=SessionToolBinding(name="set_status", message_property="status"),
    )
    b = SideConfig(
        prompt=f"B-{key}",
        session_stop=SessionToolBinding(name="approve", message_property="summary"),
    )
    session = pair(f"review-{key}", key, a, b)
    await agents.save_blueprint(session)
    boss = BlueprintSpec(name=f"boss-{key}", prompt=f"boss-{key}", tags=("default",),
                         config=BlueprintConfig(callable_agents=(session.name,)))  # fmt: skip
    await agents.save_blueprint(boss)
    agents.llm.script(f"boss-{key}", [
        ScriptStep(tool_calls=[call(session.name, message="produce and review")]),
        ScriptStep(content="the session approved it"),
    ])  # fmt: skip
    agents.llm.script(f"A-{key}", [
        ScriptStep(tool_calls=[call("set_status", status="halfway")]),
        ScriptStep(content="the work"),
    ])  # fmt: skip
    agents.llm.script(
        f"B-{key}", [ScriptStep(tool_calls=[call("approve", summary="reviewed work")])]
    )
    parent = await agents.thread(boss.name)
    await agents.invoke(parent, "delegate")
    events = await agents.wait_terminal(parent, timeout=30)
    assert [e.type for e in terminal(events)] == ["run.completed"]
    (report,) = [e.payload for e in events if isinstance(e.payload, SubagentCompleted)]
    assert report.outcome == "completed" and report.report == "reviewed work"
    assert [e.payload.status for e in events if e.type == "subagent.status"] == ["halfway"]  # type: ignore[attr-defined]


async def test_handoff_moves_control_to_the_target_on_the_same_thread(agents: Agents) -> None:
    key = agents.tenant[-10:]
    support = BlueprintSpec(name=f"support-{key}", prompt=f"support-{key} prompt", tags=("default",),
                            expose_as_tool=True, tool_description="Hand over to support.")  # fmt: skip
    front = BlueprintSpec(name=f"front-{key}", prompt=f"front-{key} prompt", tags=("default",),
                          config=BlueprintConfig(callable_agents=(support.name,)))  # fmt: skip
    await agents.save_blueprint(support)
    await agents.save_blueprint(front)
    agents.llm.script(
        f"front-{key}", [ScriptStep(tool_calls=[call(support.name, message="billing question")])]
    )
    # Step index = assistant turns so far in the conversation: support answers at step 1.
    agents.llm.script(
        f"support-{key}",
        [ScriptStep(content="unused"), ScriptStep(content="support here, refund issued")],
    )
    thread = await agents.thread(front.name)
    await agents.invoke(thread, "I need a refund")
    events = await agents.wait_terminal(thread, timeout=30)
    (end,) = terminal(events)
    assert end.type == "run.completed" and end.payload.result == "support here, refund issued"  # type: ignore[attr-defined]
    switch = next(e.payload for e in events if e.type == "thread.blueprint_switched")
    assert (switch.from_agent_type, switch.to_agent_type) == (front.name, support.name)  # type: ignore[attr-defined]
    # The same thread, the history kept: support's request carries the earlier turns.
    support_request = next(
        r for r in agents.llm.requests if f"support-{key} prompt" in str(r["messages"][0])
    )
    assert "I need a refund" in str(support_request["messages"])
