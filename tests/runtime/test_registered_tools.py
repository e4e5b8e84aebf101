"""Tools middleware registers at run time: offered from then on, run like the others."""

from __future__ import annotations

from typing import Any

from agency.contracts.events import (
    BlueprintSpec,
    RunError,
    ToolCall,
    ToolOutput,
    ToolRegistered,
)
from agency.infra.jetstream.connection import Bus
from agency.services.agents.middleware import Middleware, MiddlewareContext
from agency.services.agents.tools import (
    StateTool,
    StateToolOutcome,
    Tool,
    ToolContext,
    ToolSpec,
    define_tool,
)
from agency.services.agents.view import ThreadView
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.replay.reexecute import reexecute
from tests.runtime.conftest import make_system, running_agents


async def shout(args: dict[str, Any], ctx: ToolContext) -> str:
    """Say it louder."""
    return str(args.get("text", "")).upper() + "!"


def count_messages(args: dict[str, Any], state: ThreadView, run_id: str) -> StateToolOutcome:
    return StateToolOutcome(output=f"{len(state.messages)} messages")


SHOUT: Tool = define_tool(
    shout, parameters={"type": "object", "properties": {"text": {"type": "string"}}}
)
COUNT = StateTool(spec=ToolSpec(name="count_messages", description="Count."), fn=count_messages)


class Toolsmith(Middleware):
    """Offers `shout` from the first model call, `count_messages` once `shout` has run."""

    name = "toolsmith"
    tags = ("smith",)

    def registrable_tools(self) -> tuple[Tool | StateTool, ...]:
        return (SHOUT, COUNT)

    async def before_model(self, ctx: MiddlewareContext, plan: Any) -> None:
        ctx.register_tool(SHOUT)

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        if call.name == "shout":
            ctx.register_tool("count_messages")


class Overreacher(Middleware):
    name = "overreacher"
    tags = ("overreach",)

    async def before_model(self, ctx: MiddlewareContext, plan: Any) -> None:
        ctx.register_tool("not_mine")


def _offered(llm: FakeLLMServer, key: str) -> list[list[str]]:
    """The tool names of each model request whose first user message is `key`."""
    offered = []
    for body in llm.requests:
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if users and users[0].get("content") == key:
            offered.append(sorted(t["function"]["name"] for t in body.get("tools") or []))
    return offered


async def test_registered_tools_are_offered_from_then_on_and_run_like_the_others(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    system = (
        make_system()
        .use(Toolsmith())
        .add_agent(BlueprintSpec(name="smith", prompt="You build.", tags=("smith",)))
    )
    key = "smith-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[{"name": "shout", "arguments": {"text": "hi"}}]),
        ScriptStep(tool_calls=[{"name": "count_messages", "arguments": {}}]),
        ScriptStep(content="done"),
    ])  # fmt: skip
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("smith")
        await agents.invoke(thread, key)
        events = await agents.wait_terminal(thread)
    assert [e.type for e in events if e.type == "run.completed"] == ["run.completed"]
    registered = [e.payload for e in events if isinstance(e.payload, ToolRegistered)]
    assert [(r.name, r.kind, r.middleware) for r in registered] == [
        ("shout", "external", "toolsmith"),
        ("count_messages", "state", "toolsmith"),
    ]
    assert registered[0].description == "Say it louder."
    outputs = {
        e.payload.tool_name: e.payload.output for e in events if isinstance(e.payload, ToolOutput)
    }
    assert outputs == {"shout": "HI!", "count_messages": "4 messages"}
    # The tools service ran `shout`; the runtime ran `count_messages` itself.
    assert "tool.requested" in [e.type for e in events]
    assert _offered(llm, key) == [
        ["shout"],
        ["count_messages", "shout"],
        ["count_messages", "shout"],
    ]
    # Re-execution registers the same tools at the same points and runs them the same way.
    report = await reexecute([events], system)
    assert report.same, report.comparisons
    # Without the middleware's tools the recorded registrations offer nothing.
    bare = make_system().add_agent(
        BlueprintSpec(name="smith", prompt="You build.", tags=("smith",))
    )
    assert not (await reexecute([events], bare)).same


async def test_registering_a_tool_no_middleware_offers_ends_the_run_with_an_internal_error(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    system = (
        make_system()
        .use(Overreacher())
        .add_agent(BlueprintSpec(name="overreaching", prompt="x", tags=("overreach",)))
    )
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("overreaching")
        await agents.invoke(thread, "overreach-" + tenant)
        events = await agents.wait_terminal(thread)
    (error,) = [e.payload for e in events if isinstance(e.payload, RunError)]
    assert error.kind == "internal_error" and "not_mine" in error.error
