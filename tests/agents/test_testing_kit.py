"""The testing kit: an app's typed tools, blueprints and middleware tested in process, with
no NATS, no PostgreSQL and no network; the same scripted model serves the fake server."""

from __future__ import annotations

from typing import Annotated

import httpx
import msgspec
import pytest
from structlog.testing import capture_logs

from agency import AgentSystem, Middleware, MiddlewareContext, ToolContext, tool
from agency.contracts.events import BlueprintSpec, ChatMessage, ToolCall
from agency.contracts.events.blueprint import BlueprintConfig, HitlConfig
from agency.services.agents.middleware import ModelPlan
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.testing import (
    AgentHarness,
    HarnessError,
    ScriptedModel,
    call,
    reply,
    run_tool,
)


@tool
async def weather(ctx: ToolContext, city: Annotated[str, "the city's name"], days: int = 1) -> str:
    """The weather in a city for the next days."""
    return f"sunny in {city} for {days} day(s)"


@tool
def send_report(to: str, text: str) -> str:
    """Send a report by email."""
    return f"sent to {to}"


class Brief(Middleware):
    """Asks for short answers and counts the tool results it sees."""

    name = "brief"

    def __init__(self) -> None:
        self.results: list[str] = []

    def system_prompt(self, ctx: MiddlewareContext) -> str | None:
        return "Answer in one sentence."

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        plan.tools = [t for t in plan.tools if t.name != "send_report"]

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        self.results.append(result)


def app(brief: Brief | None = None) -> AgentSystem:
    system = (
        AgentSystem()
        .defaults()
        .add_tool(weather, ["weather"])
        .add_tool(send_report, ["mail"])
        .add_agent(BlueprintSpec(name="forecaster", prompt="You forecast.", tags=("weather",)))
        .add_agent(
            BlueprintSpec(
                name="reporter",
                prompt="You report.",
                tags=("weather", "mail"),
                config=BlueprintConfig(hitl=HitlConfig(tools=("send_report",))),
            )
        )
    )
    if brief is not None:
        system.use(brief, ["weather"])
    return system


async def test_a_typed_tool_runs_with_its_arguments_converted() -> None:
    result = await run_tool(app(), "weather", {"city": "Paris", "days": 3})
    assert result.ok and result.output == "sunny in Paris for 3 day(s)"
    assert (await run_tool(weather, "weather", '{"city": "Oslo"}')).output == (
        "sunny in Oslo for 1 day(s)"
    )


async def test_a_bad_argument_gives_the_error_the_model_would_get() -> None:
    result = await run_tool(app(), "weather", {"city": "Paris", "days": "three"})
    assert not result.ok
    assert result.error == (
        "invalid arguments for tool 'weather': argument `days`: Expected `int`, got `str`"
    )
    missing = await run_tool(app(), "weather", {})
    assert missing.error == "invalid arguments for tool 'weather': missing required argument `city`"
    with pytest.raises(HarnessError, match="no tool 'forecast'"):
        await run_tool(app(), "forecast", {})


async def test_a_run_calls_the_tool_and_ends_with_the_answer() -> None:
    model = ScriptedModel([call("weather", city="Paris", days=2), reply("Sunny, two days.")])
    transcript = await AgentHarness(app(), blueprint="forecaster", model=model).run("Paris?")
    assert (transcript.status, transcript.answer) == ("completed", "Sunny, two days.")
    assert transcript.call("weather").output == "sunny in Paris for 2 day(s)"
    assert {"tool.output", "run.completed"} <= set(transcript.events)


async def test_a_bad_argument_in_a_run_is_the_tool_error_the_model_reads() -> None:
    model = ScriptedModel([call("weather", city="Paris", days="two"), reply("Sorry.")])
    transcript = await AgentHarness(app(), blueprint="forecaster", model=model).run("Paris?")
    assert transcript.status == "completed"
    record = transcript.call("weather")
    assert record.output is None and record.error is not None
    assert "argument `days`: Expected `int`, got `str`" in record.error
    (tool_message,) = [m for m in model.requests[1].messages if m.role == "tool"]
    assert tool_message.content == record.error


async def test_a_tool_held_for_approval_waits_then_runs_once_approved() -> None:
    model = ScriptedModel(
        [[call("weather", city="Rome"), call("send_report", to="a@b.c", text="sunny")],
         reply("Reported.")]
    )  # fmt: skip
    harness = AgentHarness(app(), blueprint="reporter", model=model)
    waiting = await harness.run("Report Rome's weather.")
    assert (waiting.status, waiting.reason) == ("paused", "hitl")
    (held,) = waiting.awaiting_approval
    assert (held.name, held.output) == ("send_report", None)

    done = await harness.approve()
    assert (done.status, done.answer) == ("completed", "Reported.")
    assert done.call("send_report").output == "sent to a@b.c"
    assert not done.awaiting_approval
    with pytest.raises(HarnessError, match="awaits approval"):
        await harness.approve()


async def test_a_rejected_call_is_not_run() -> None:
    model = ScriptedModel([call("send_report", to="a@b.c", text="x"), reply("Not sent.")])
    harness = AgentHarness(app(), blueprint="reporter", model=model)
    await harness.run("Report.")
    done = await harness.approve(False)
    assert done.status == "completed"
    assert done.call("send_report").output == "The user rejected this tool call; it was not run."


async def test_a_middlewares_hooks_act_on_the_run() -> None:
    brief = Brief()
    model = ScriptedModel([call("weather", city="Lima"), reply("Sunny.")])
    transcript = await AgentHarness(app(brief), blueprint="reporter", model=model).run("Lima?")
    assert transcript.status == "completed"
    first = model.requests[0]
    assert first.messages[0] == ChatMessage(
        role="system", content="You report.\n\nAnswer in one sentence."
    )
    assert [t.name for t in first.tools] == ["weather"]  # before_model took send_report away
    assert brief.results == ["sunny in Lima for 1 day(s)"]
    assert "middleware.before_model" in transcript.events


async def test_state_tools_and_a_second_turn_run_on_the_same_thread() -> None:
    system = app().add_agent(
        BlueprintSpec(name="planner", prompt="Plan.", tags=("default", "weather"))
    )
    model = ScriptedModel([call("write_file", path="notes.md", content="# n"), reply("Noted.")])
    harness = AgentHarness(system, blueprint="planner", model=model)
    first = await harness.run("Take notes.")
    second = await harness.run("Again.")
    assert (first.answer, second.answer, second.status) == ("Noted.", "Noted.", "completed")
    assert (await harness.state()).file("notes.md") == "# n"
    assert len(model.requests) == 4  # steps count per turn: each turn replays the script


async def test_a_blueprint_is_named_or_given_and_an_unknown_one_refused() -> None:
    system = app()
    with pytest.raises(HarnessError, match="no blueprint 'nobody'; it has: forecaster, reporter"):
        AgentHarness(system, blueprint="nobody", model=ScriptedModel([]))
    given = BlueprintSpec(name="terse", prompt="Be terse.", tags=("weather",))
    model = ScriptedModel([call("weather", city="Nice"), reply("Sunny.")])
    transcript = await AgentHarness(system, blueprint=given, model=model).run("Nice?")
    assert transcript.call("weather").output == "sunny in Nice for 1 day(s)"
    assert model.requests[0].messages[0].content == "Be terse."
    assert "terse" not in system.blueprints


async def test_the_same_script_served_by_the_fake_server_gives_the_same_run() -> None:
    steps = [call("weather", city="Oslo") + call("weather", city="Bergen"), reply("Both sunny.")]
    local = ScriptedModel(steps)
    here = await AgentHarness(app(), blueprint="forecaster", model=local).run("oslo-bergen")
    async with FakeLLMServer(instant=True) as llm:
        body = msgspec.json.encode(ScriptedModel(steps).as_fake_script("oslo-bergen"))
        async with httpx.AsyncClient(timeout=5) as http:
            r = await http.post(llm.base_url.removesuffix("/v1") + "/_scripts", content=body)
        assert r.status_code == 204, r.text
        async with OpenAIProvider(base_url=llm.base_url, api_key="fake") as remote:
            there = await AgentHarness(app(), blueprint="forecaster", model=remote).run(
                "oslo-bergen"
            )
    assert (
        (here.status, here.answer) == (there.status, there.answer) == ("completed", "Both sunny.")
    )
    outputs = [(c.name, c.output) for c in here.tool_calls]
    assert outputs == [(c.name, c.output) for c in there.tool_calls]
    assert outputs == [
        ("weather", "sunny in Oslo for 1 day(s)"),
        ("weather", "sunny in Bergen for 1 day(s)"),
    ]


class Broken(Middleware):
    name = "broken"

    async def on_tool_result(self, ctx: MiddlewareContext, call: ToolCall, result: str) -> None:
        raise RuntimeError("the audit store is down")


@tool(local=True)
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


async def test_a_local_tool_runs_in_the_loop_and_a_failing_hook_ends_the_run_with_why() -> None:
    system = app().add_tool(shout, ["weather"])
    model = ScriptedModel([call("shout", text="hey"), reply("Shouted.")])
    transcript = await AgentHarness(system, blueprint="forecaster", model=model).run("Shout.")
    assert transcript.call("shout").output == "HEY"
    assert "tool.requested" not in transcript.events  # run by the runtime, as a local tool

    system.use(Broken(), ["weather"])
    model = ScriptedModel([call("weather", city="Riga"), reply("Sunny.")])
    with capture_logs() as logs:
        failed = await AgentHarness(system, blueprint="forecaster", model=model).run("Riga?")
    assert "run failed" in [entry["event"] for entry in logs]
    assert failed.status == "error"
    assert failed.reason is not None and "the audit store is down" in failed.reason
