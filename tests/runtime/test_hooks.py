"""Middleware hooks around tools and resumes, with what they emit appended to the log."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from agency.contracts.events import (
    BlueprintSpec,
    ChatMessage,
    MessageAppended,
    RunError,
    Todo,
    TodosWritten,
    ToolCall,
)
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    HitlConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.outage import is_outage
from agency.services.agents.middleware import ChildReport, Middleware, MiddlewareContext
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.failures import MiddlewareUnavailable, hook, is_retried
from tests.runtime.conftest import make_system, running_agents


class Recorder(Middleware):
    name = "recorder"
    tags = ("recorded",)

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        self.seen.append(("start", call.name))

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        self.seen.append(("result", call.name))
        # Hooks act through events, like everything else.
        ctx.emit(TodosWritten(run_id=ctx.run_id, todos=(Todo(content=f"saw {call.name}"),)))

    async def on_tool_error(self, ctx: MiddlewareContext, call: ToolCall, error: str) -> None:
        self.seen.append(("error", call.name))

    async def on_resume(self, ctx: MiddlewareContext, reason: str, payload: Any) -> None:
        self.seen.append(("resume", reason))

    async def on_model_result(self, ctx: MiddlewareContext, message: ChatMessage) -> None:
        self.seen.append(("model", str(len(message.tool_calls))))


async def test_tool_and_resume_hooks_run_and_their_events_are_appended(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    recorder = Recorder()
    system = (
        make_system()
        .use(recorder)
        .add_agent(
            BlueprintSpec(
                name="recorded",
                prompt="recorded agent",
                tags=("default", "lookup", "hitl", "recorded"),
                config=BlueprintConfig(hitl=HitlConfig(tools=("lookup",))),
            )
        )
    )
    key = "hooks-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "w"}}]),
        ScriptStep(tool_calls=[{"name": "read_file", "arguments": {"path": "missing.md"}}]),
        ScriptStep(content="done"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("recorded")
        await agents.invoke(thread, key)
        await agents.wait_for(thread, lambda es: "run.paused" in [e.type for e in es])
        await agents.approve(thread, approved=True)
        events = await agents.wait_terminal(thread)
    assert [e.type for e in events if e.type == "run.completed"] == ["run.completed"]
    assert ("resume", "hitl") in recorder.seen
    assert ("start", "lookup") in recorder.seen and ("result", "lookup") in recorder.seen
    assert ("error", "read_file") in recorder.seen
    todos = [e.payload.todos for e in events if isinstance(e.payload, TodosWritten)]
    assert (Todo(content="saw lookup"),) in todos


async def test_only_the_model_hooks_a_middleware_has_run_and_are_recorded(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    recorder = Recorder()  # has `on_model_result`, not `before_model`
    spec = BlueprintSpec(name="recorded", prompt="recorded agent", tags=("default", "recorded"))
    system = make_system().use(recorder).add_agent(spec)
    key = "model-hooks-" + tenant
    llm.script(key, [ScriptStep(content="done")])
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("recorded")
        await agents.invoke(thread, key)
        events = await agents.wait_terminal(thread)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert recorder.seen == [("model", "0")]
    before = [e.payload.middleware_name for e in events if e.type == "middleware.before_model"]
    after = [e.payload.middleware_name for e in events if e.type == "middleware.after_model"]
    assert "recorder" in after and "recorder" not in before
    # The `default` tag's middleware that only offer tools or state have neither event.
    assert "filesystem" not in before + after
    assert "subagents" in before  # it adds the subagents' list to each call


class ReportReviewer(Middleware):
    """Rewrites every child report the parent is given and notes it in the todos."""

    name = "reviewer"
    tags = ("reviewed",)

    def __init__(self) -> None:
        self.seen: list[ChildReport] = []

    async def on_child_report(self, ctx: MiddlewareContext, child: ChildReport) -> None:
        self.seen.append(child)
        child.report = f"[reviewed {child.outcome}] {child.report}"
        ctx.emit(TodosWritten(run_id=ctx.run_id, todos=(Todo(content=f"read {child.thread_id}"),)))


class FailingReviewer(Middleware):
    name = "failing_reviewer"
    tags = ("failing_review",)

    async def on_child_report(self, ctx: MiddlewareContext, child: ChildReport) -> None:
        raise RuntimeError("cannot review")


def _manager(name: str, tag: str) -> BlueprintSpec:
    return BlueprintSpec(
        name=name,
        prompt="You delegate.",
        tags=("default", tag),
        config=BlueprintConfig(
            subagents=SubagentsConfig(
                subagents=("worker", SubagentEntry(name="background", blocking=False))
            )
        ),
    )


def _task(description: str, kind: str = "worker") -> dict[str, Any]:
    return {"name": "task", "arguments": {"description": description, "subagentType": kind}}


def _messages(events: list[RecordedEvent], role: str) -> list[str]:
    return [
        e.payload.message.content
        for e in events
        if isinstance(e.payload, MessageAppended) and e.payload.message.role == role
    ]


async def test_child_reports_pass_on_child_report_which_changes_them_and_adds_events(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    reviewer = ReportReviewer()
    system = make_system().use(reviewer).add_agent(_manager("reviewing", "reviewed"))
    key = "review-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[_task(f"ok {key}"), _task(f"broken {key}")]),
        ScriptStep(tool_calls=[_task(f"later {key}", "background")]),
        ScriptStep(content="carrying on"),
        ScriptStep(content="read the background report"),
    ])  # fmt: skip
    llm.script(f"ok {key}", [ScriptStep(content="child result")])
    llm.script(f"broken {key}", [ScriptStep(status=400, times=99)])
    llm.script(f"later {key}", [ScriptStep(content="background result", delay_ms=300)])
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        parent = await agents.thread("reviewing")
        await agents.invoke(parent, key)
        events = await agents.wait_terminal(parent, count=2, timeout=40)
    tool_messages = _messages(events, "tool")
    assert "[reviewed completed] child result" in tool_messages
    assert any(m.startswith("[reviewed error] Subagent error: ") for m in tool_messages)
    (queued,) = [m for m in _messages(events, "user") if "Subagent (reference" in m]
    assert queued.startswith("[reviewed completed] Subagent (reference: ")
    assert "background result" in queued
    assert sorted((c.outcome, c.blocking) for c in reviewer.seen) == [
        ("completed", False), ("completed", True), ("error", True)
    ]  # fmt: skip
    assert all(c.token for c in reviewer.seen)
    noted = {
        t.content for e in events if isinstance(e.payload, TodosWritten) for t in e.payload.todos
    }
    assert noted == {f"read {c.thread_id}" for c in reviewer.seen}
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == [
        "run.completed", "run.completed"
    ]  # fmt: skip


async def test_a_raising_on_child_report_ends_the_run_with_an_internal_error(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    system = make_system().use(FailingReviewer()).add_agent(_manager("failing", "failing_review"))
    key = "review-fail-" + tenant
    llm.script(key, [ScriptStep(tool_calls=[_task(f"ok {key}")]), ScriptStep(content="never")])
    llm.script(f"ok {key}", [ScriptStep(content="child result")])
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        parent = await agents.thread("failing")
        await agents.invoke(parent, key)
        events = await agents.wait_terminal(parent, timeout=30)
    (error,) = [e.payload for e in events if isinstance(e.payload, RunError)]
    assert error.kind == "internal_error"
    assert error.error.startswith(
        "middleware 'failing_reviewer' (FailingReviewer.on_child_report) raised at "
        "tests/runtime/test_hooks.py, line "
    )
    assert error.error.endswith(", in on_child_report: RuntimeError: cannot review")


class FlakyAuditor(Middleware):
    """Reports each tool start to a service of the app's own, which refuses the first two
    connections."""

    name = "flaky_auditor"
    tags = ("flaky_audit",)

    def __init__(self) -> None:
        self.calls = 0

    async def on_tool_start(self, ctx: MiddlewareContext, call: ToolCall) -> None:
        self.calls += 1
        if self.calls <= 2:
            raise ConnectionRefusedError(111, "the audit service refused the connection")


def test_a_hook_refused_a_connection_is_the_app_s_failure_retried_never_an_outage() -> None:
    with pytest.raises(MiddlewareUnavailable) as raised, hook(FlakyAuditor(), "on_tool_start"):
        raise ConnectionRefusedError(111, "refused")
    assert not is_outage(raised.value) and is_retried(raised.value)
    assert "middleware 'flaky_auditor' (FlakyAuditor.on_tool_start) raised at" in str(raised.value)


async def test_a_hook_that_answers_on_a_later_delivery_lets_the_run_complete_without_an_outage_wait(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    """The trigger is delivered again (each delivery one of the run's attempts) until the
    hook answers; nothing is waited out as the broker's outage."""
    auditor = FlakyAuditor()
    system = (
        make_system()
        .use(auditor)
        .add_agent(
            BlueprintSpec(
                name="audited", prompt="audited agent", tags=("default", "lookup", "flaky_audit")
            )
        )
    )
    key = "flaky-hook-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "w"}}]),
        ScriptStep(content="done"),
    ])  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
            thread = await agents.thread("audited")
            await agents.invoke(thread, key)
            events = await agents.wait_terminal(thread, timeout=60)
    assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"]
    assert auditor.calls >= 3
    assert not [e for e in logs if e["event"] == "waiting out an outage"]
