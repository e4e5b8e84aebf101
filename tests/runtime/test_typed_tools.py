"""A whole run with a `@tool`: the model sees the schema of the signature, a call with a bad
argument answers it a tool error naming the argument, the corrected call runs; in the tools
service and, for a tool declared local, in the runtime."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import pytest

from agency import AgentSystem, ToolContext, tool
from agency.contracts.events import BlueprintSpec, MessageAppended, ToolError, ToolOutput
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.runtime.conftest import Agents, running_agents
from tests.runtime.test_loop import assert_gapless, terminals, types


@tool
async def add(ctx: ToolContext, a: Annotated[int, "the first term"], b: int = 0) -> str:
    """Add two integers."""
    return f"{a} + {b} = {a + b}"


@tool(name="add_here", local=True)
async def add_here(a: int, b: int = 0) -> str:
    """Add two integers, in the runtime."""
    return f"{a} + {b} = {a + b}"


def build() -> AgentSystem:
    return (
        AgentSystem()
        .add_tool(add, ["sums"])
        .add_tool(add_here, ["sums"])
        .add_agent(BlueprintSpec(name="counter", prompt="You add.", tags=("sums",)))
    )


@pytest.fixture
async def agents(bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer) -> AsyncIterator[Agents]:
    async with running_agents(bus, nats_url, tenant, llm, system=build()) as running:
        yield running


@pytest.mark.parametrize("name", ["add", "add_here"], ids=["tools-service", "local"])
async def test_a_bad_argument_is_answered_naming_it_then_the_good_call_runs(
    agents: Agents, name: str
) -> None:
    key = f"typed-{name}-{agents.tenant}"
    agents.llm.script(key, [
        ScriptStep(tool_calls=[{"name": name, "arguments": {"a": "two", "b": 1}}]),
        ScriptStep(tool_calls=[{"name": name, "arguments": {"a": 2, "b": 1}}]),
        ScriptStep(content="Three."),
    ])  # fmt: skip
    thread = await agents.thread("counter")
    await agents.invoke(thread, f"add {key}")
    events = await agents.wait_terminal(thread)

    assert_gapless(events)
    assert terminals(events) == ["run.completed"]
    (error,) = [e.payload for e in events if isinstance(e.payload, ToolError)]
    assert error.error == (
        f"invalid arguments for tool {name!r}: argument `a`: Expected `int`, got `str`"
    )
    (output,) = [e.payload for e in events if isinstance(e.payload, ToolOutput)]
    assert output.output == "2 + 1 = 3"
    answers = [
        e.payload.message.content
        for e in events
        if isinstance(e.payload, MessageAppended) and e.payload.message.role == "tool"
    ]
    assert answers == [error.error, "2 + 1 = 3"]  # what the model read
    assert ("tool.requested" in types(events)) == (name == "add")

    (first, *_) = [r for r in agents.llm.requests if key in str(r["messages"])]
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert offered["add"]["description"] == "Add two integers."
    assert offered["add"]["parameters"]["properties"] == {
        "a": {"type": "integer", "description": "the first term"},
        "b": {"type": "integer", "default": 0},
    }
