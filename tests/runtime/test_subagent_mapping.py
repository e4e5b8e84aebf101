"""Seed 001 §7.10: which arguments of a subagent call become the child's first user message
and its attachments (`initUserMessageProperty`, `initAttachmentsProperty`), and which files
a session's end returns to the parent (`attachmentsProperty` of `sessionStop` /
`sessionFail`)."""

from __future__ import annotations

from typing import Any

from agency.contracts.events import (
    BlueprintSpec,
    MessageAppended,
    SessionToolBinding,
    SideConfig,
    SubagentCompleted,
    SubagentSpawned,
    ToolError,
)
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from tests.runtime.conftest import Agents


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


def files(events: list[RecordedEvent]) -> dict[str, str]:
    out: dict[str, str] = {}
    for e in events:
        if e.type == "file.written":
            out[e.payload.path] = e.payload.content  # type: ignore[attr-defined]
    return out


def child_of(events: list[RecordedEvent]) -> str:
    return next(e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned))


def first_user_message(events: list[RecordedEvent]) -> str:
    return next(
        e.payload.message.content
        for e in events
        if isinstance(e.payload, MessageAppended) and e.payload.message.role == "user"
    )


def offered_tool(agents: Agents, key: str, name: str) -> dict[str, Any]:
    """The parameters of tool `name` in the first model request mentioning `key`."""
    request = next(r for r in agents.llm.requests if key in str(r["messages"]))
    return next(
        t["function"]["parameters"] for t in request["tools"] if t["function"]["name"] == name
    )


def terminal(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events if e.type in RUN_TERMINAL_TYPES]


def session(
    key: str, a: SideConfig, b: SideConfig, **fields: Any
) -> tuple[BlueprintSpec, BlueprintSpec]:
    """A dual-AI session exposed as a tool, and a boss that may call it."""
    pair = BlueprintSpec(
        name=f"session-{key}",
        type="dual_ai",
        tags=("default",),
        side_a=a,
        side_b=b,
        max_session_turns=4,
        expose_as_tool=True,
        **fields,
    )
    boss = BlueprintSpec(
        name=f"boss-{key}",
        prompt=f"boss-{key}",
        tags=("default",),
        config=BlueprintConfig(callable_agents=(pair.name,)),
    )
    return pair, boss


async def test_an_exposed_session_starts_from_its_mapped_message_and_attachments(
    agents: Agents,
) -> None:
    key = agents.tenant[-10:]
    stop = SessionToolBinding(name="approve", message_property="summary")
    pair, boss = session(
        key,
        SideConfig(prompt=f"A-{key}"),
        SideConfig(prompt=f"B-{key}", session_stop=stop),
        init_user_message_property="brief",
        init_attachments_property="images",
    )
    await agents.save_blueprint(pair)
    await agents.save_blueprint(boss)
    agents.llm.script(f"boss-{key}", [
        ScriptStep(tool_calls=[call("write_file", path="a.png", content="A"),
                               call("write_file", path="b.png", content="B")]),
        ScriptStep(tool_calls=[call(pair.name, message="the old argument")]),
        ScriptStep(tool_calls=[call(pair.name, brief="draw a tree", images=["a.png"])]),
        ScriptStep(content="the session drew it"),
    ])  # fmt: skip
    agents.llm.script(f"A-{key}", [ScriptStep(content="a tree")])
    agents.llm.script(f"B-{key}", [ScriptStep(tool_calls=[call("approve", summary="fine tree")])])
    parent = await agents.thread(boss.name)
    await agents.invoke(parent, "delegate")
    events = await agents.wait_terminal(parent, timeout=30)

    assert terminal(events) == ["run.completed"]
    (refused,) = [e.payload.error for e in events if isinstance(e.payload, ToolError)]
    assert refused == f"{pair.name} needs a non-empty `brief`"
    child = child_of(events)
    child_events = await agents.events(child)
    assert first_user_message(child_events) == "draw a tree\n\nAttached files: a.png"
    assert files(child_events) == {"a.png": "A"}
    (report,) = [e.payload for e in events if isinstance(e.payload, SubagentCompleted)]
    assert report.report == "fine tree"
    parameters = offered_tool(agents, f"boss-{key}", pair.name)
    assert set(parameters["properties"]) == {"brief", "images"}
    assert parameters["required"] == ["brief"]


async def test_task_reads_the_entrys_mapped_arguments(agents: Agents) -> None:
    key = agents.tenant[-10:]
    entry = SubagentEntry(
        name="worker", init_user_message_property="brief", init_attachments_property="inputs"
    )
    lead = BlueprintSpec(
        name=f"lead-{key}",
        prompt=f"lead-{key}",
        tags=("default",),
        config=BlueprintConfig(subagents=SubagentsConfig(subagents=(entry,))),
    )
    await agents.save_blueprint(lead)
    agents.llm.script(f"lead-{key}", [
        ScriptStep(tool_calls=[call("write_file", path="in.md", content="notes"),
                               call("write_file", path="other.md", content="x")]),
        ScriptStep(tool_calls=[call("task", subagentType="worker", description=f"old {key}")]),
        ScriptStep(tool_calls=[call("task", subagentType="worker", brief=f"summarise {key}-child",
                                    inputs="in.md")]),
        ScriptStep(content="summarised"),
    ])  # fmt: skip
    agents.llm.script(f"{key}-child", [ScriptStep(content="a summary")])
    parent = await agents.thread(lead.name)
    await agents.invoke(parent, "go")
    events = await agents.wait_terminal(parent, timeout=30)

    assert terminal(events) == ["run.completed"]
    (refused,) = [e.payload.error for e in events if isinstance(e.payload, ToolError)]
    assert refused == "task of worker needs a non-empty `brief`"
    child_events = await agents.events(child_of(events))
    assert first_user_message(child_events) == f"summarise {key}-child\n\nAttached files: in.md"
    assert files(child_events) == {"in.md": "notes"}
    parameters = offered_tool(agents, f"lead-{key}", "task")
    assert {"brief", "inputs"} <= set(parameters["properties"])
    assert "description" not in parameters["required"]


async def test_session_stop_returns_only_the_files_it_names(agents: Agents) -> None:
    key = agents.tenant[-10:]
    stop = SessionToolBinding(name="approve", message_property="summary",
                              attachments_property="files")  # fmt: skip
    pair, boss = session(
        key, SideConfig(prompt=f"A-{key}"), SideConfig(prompt=f"B-{key}", session_stop=stop)
    )
    await agents.save_blueprint(pair)
    await agents.save_blueprint(boss)
    agents.llm.script(f"boss-{key}", [
        ScriptStep(tool_calls=[call(pair.name, message="make files")]),
        ScriptStep(content="got them"),
    ])  # fmt: skip
    agents.llm.script(f"A-{key}", [
        ScriptStep(tool_calls=[call("write_file", path="out/keep.md", content="keep"),
                               call("write_file", path="out/draft.md", content="draft")]),
        ScriptStep(content="both written"),
    ])  # fmt: skip
    agents.llm.script(f"B-{key}", [
        ScriptStep(tool_calls=[call("approve", summary="approved", files=["out/nope.md"])]),
        ScriptStep(tool_calls=[call("approve", summary="approved", files=["out/keep.md"])]),
    ])  # fmt: skip
    parent = await agents.thread(boss.name)
    await agents.invoke(parent, "delegate")
    events = await agents.wait_terminal(parent, timeout=30)

    assert terminal(events) == ["run.completed"]
    child = child_of(events)
    child_events = await agents.events(child)
    errors = [e.payload.error for e in child_events if isinstance(e.payload, ToolError)]
    assert errors == ["approve names files that do not exist in `files`: out/nope.md"]
    (report,) = [e.payload for e in events if isinstance(e.payload, SubagentCompleted)]
    assert report.outcome == "completed"
    assert report.attachments == (f"subagents/{child}/out/keep.md",)
    returned = {p: c for p, c in files(events).items() if p.startswith("subagents/")}
    assert returned == {f"subagents/{child}/out/keep.md": "keep"}


async def test_session_fail_returns_the_files_it_names(agents: Agents) -> None:
    key = agents.tenant[-10:]
    fail = SessionToolBinding(name="give_up", message_property="reason",
                              attachments_property="evidence")  # fmt: skip
    pair, boss = session(
        key, SideConfig(prompt=f"A-{key}", session_fail=fail), SideConfig(prompt=f"B-{key}")
    )
    await agents.save_blueprint(pair)
    await agents.save_blueprint(boss)
    agents.llm.script(f"boss-{key}", [
        ScriptStep(tool_calls=[call(pair.name, message="try it")]),
        ScriptStep(content="it failed"),
    ])  # fmt: skip
    agents.llm.script(f"A-{key}", [
        ScriptStep(tool_calls=[call("write_file", path="log.txt", content="trace"),
                               call("write_file", path="scratch.txt", content="tmp")]),
        ScriptStep(tool_calls=[call("give_up", reason="impossible", evidence="log.txt")]),
    ])  # fmt: skip
    parent = await agents.thread(boss.name)
    await agents.invoke(parent, "delegate")
    events = await agents.wait_terminal(parent, timeout=30)

    child = child_of(events)
    (report,) = [e.payload for e in events if isinstance(e.payload, SubagentCompleted)]
    assert report.outcome == "error"
    assert report.attachments == (f"subagents/{child}/log.txt",)
    assert "impossible" in report.report
    returned = {p: c for p, c in files(events).items() if p.startswith("subagents/")}
    assert returned == {f"subagents/{child}/log.txt": "trace"}
