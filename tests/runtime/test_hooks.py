"""Middleware hooks around tools and resumes, with what they emit appended to the log."""

from __future__ import annotations

from typing import Any

from contracts.events import BlueprintSpec, ChatMessage, Todo, TodosWritten, ToolCall
from contracts.events.registry import BlueprintConfig, HitlConfig
from infra.jetstream.connection import Bus
from services.agents.middleware import Middleware, MiddlewareContext
from services.llm.fake_scripts import ScriptStep
from services.llm.fake_server import FakeLLMServer
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
