"""A failure that a retry cannot fix ends the run with `run.error` saying what happened."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from structlog.testing import capture_logs

from agency.contracts.events import BlueprintSpec, ChatMessage, ToolCall
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.limits import is_truncated, limits
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.leases import Leases
from agency.services.agents.middleware import Middleware, MiddlewareContext, ModelPlan
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.service import RuntimeService
from tests.helpers import settled
from tests.runtime.conftest import make_system, running_agents


class BrokenBeforeModel(Middleware):
    name = "broken-before-model"
    tags = ("broken-before",)

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        raise ValueError("the plan cannot be built")


class BrokenToolResult(Middleware):
    name = "broken-tool-result"
    tags = ("broken-result",)

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        raise KeyError("missing")


def raised_at(hook: Callable[..., Any]) -> str:
    """Where a one-line hook of this file raises, as a run's error names it."""
    code = hook.__code__
    return f"{os.path.relpath(code.co_filename)}, line {code.co_firstlineno + 1}, in {code.co_name}"


async def test_a_middleware_that_raises_ends_the_run_with_its_error(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    system = (
        make_system()
        .use(BrokenBeforeModel())
        .add_agent(BlueprintSpec(name="broken", prompt="b", tags=("default", "broken-before")))
    )
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("broken")
        with capture_logs() as logs:
            run_id = await agents.invoke(thread, "anything")
            events = await agents.wait_terminal(thread)
    terminals = [e for e in events if e.type in RUN_TERMINAL_TYPES]
    assert [e.type for e in terminals] == ["run.error"]
    error = terminals[0].payload
    assert error.run_id == run_id
    assert error.kind == "internal_error"
    # The middleware, its class and hook, and the line of the app's code it raised at.
    where = raised_at(BrokenBeforeModel.before_model)
    assert error.error == (
        f"middleware 'broken-before-model' (BrokenBeforeModel.before_model) raised at {where}: "
        "ValueError: the plan cannot be built"
    )
    # Logged with its traceback (the hook's own as its cause) by each drive that met it.
    logged = [e for e in logs if e["event"] == "run failed" and e["thread_id"] == thread]
    assert logged
    assert {(e["middleware"], e["hook"], e["raised_at"], e["exc_info"]) for e in logged} == {
        ("broken-before-model", "BrokenBeforeModel.before_model", where, True)
    }
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert not any(e.type == "model.started" for e in events)


async def test_a_failing_tool_hook_ends_the_run_and_answers_its_open_calls(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "broken-hook-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[
            {"name": "lookup", "arguments": {"word": "a"}},
            {"name": "lookup", "arguments": {"word": "b"}},
        ]),
        ScriptStep(content="never reached"),
    ])  # fmt: skip
    system = (
        make_system()
        .use(BrokenToolResult())
        .add_agent(
            BlueprintSpec(name="hooked", prompt="h", tags=("default", "lookup", "broken-result"))
        )
    )
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("hooked")
        await agents.invoke(thread, key)
        events = await agents.wait_terminal(thread)
        # The thread stays usable: a next run starts from a valid conversation.
        llm.script(key + "-next", [ScriptStep(content="fine again")])
        await agents.invoke(thread, key + "-next")
        events = await agents.wait_terminal(thread, count=2)
    terminals = [e.payload for e in events if e.type in RUN_TERMINAL_TYPES]
    assert [type(t).__name__ for t in terminals] == ["RunError", "RunCompleted"]
    assert terminals[0].error == (
        "middleware 'broken-tool-result' (BrokenToolResult.on_tool_result) raised at "
        f"{raised_at(BrokenToolResult.on_tool_result)}: KeyError: 'missing'"
    )
    messages = [e.payload.message for e in events if e.type == "message.appended"]
    calls = [c.id for m in messages for c in m.tool_calls]
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    assert set(calls) <= answered


async def test_a_model_answer_larger_than_an_event_is_truncated_with_a_marker(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "huge-answer-" + tenant
    word = "w" * 999 + " "
    llm.script(key, [ScriptStep(content=word * 3000)])  # 3 MB in 3,000 streamed pieces
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread()
        await agents.invoke(thread, key)
        events = await agents.wait_terminal(thread, timeout=60)
    terminals = [e for e in events if e.type in RUN_TERMINAL_TYPES]
    assert [e.type for e in terminals] == ["run.completed"]
    answer: ChatMessage = next(
        e.payload.message
        for e in events
        if e.type == "message.appended" and e.payload.message.role == "assistant"
    )
    assert answer.content.startswith(word * 2)
    assert is_truncated(answer.content)
    assert len(answer.content.encode()) <= limits().max_message_bytes
    streamed = sum(len(e.payload.delta) for e in events if e.type == "model.delta")
    assert streamed <= limits().max_message_bytes


async def test_a_trigger_dead_lettered_after_its_deliveries_ends_its_run(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    """What the trigger consumer does just before it dead-letters an exhausted trigger."""
    key = "exhausted-" + tenant
    llm.script(key, [ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "w"}}])])
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread("approver")  # pauses for a person: the run stays open
        run_id = await agents.invoke(thread, key)
        events = await agents.wait_for(thread, lambda es: settled(es)[-1].type == "run.paused")
        trigger = next(e for e in events if e.type == "request.accepted")
        leases = await Leases(bus.js, owner="test").open()
        service = RuntimeService(
            bus, make_system(), OpenAIProvider(base_url=llm.base_url, api_key="fake"), leases=leases
        )
        await service._on_trigger_dead_letter(trigger, "exhausted", "RuntimeError: boom")
        events = await agents.wait_terminal(thread)
    terminal = next(e.payload for e in events if e.type in RUN_TERMINAL_TYPES)
    assert terminal.run_id == run_id
    assert terminal.kind == "trigger_exhausted"
    assert "RuntimeError: boom" in terminal.error
