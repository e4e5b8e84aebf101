"""Code agents end to end: real NATS, the runtime services, the fake model over HTTP."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agency import AgentContext
from agency.contracts.commands import ForkThread, InvokeThread
from agency.contracts.events import (
    AgentStateSet,
    BlueprintSpec,
    BlueprintSwitched,
    ChatMessage,
    MessageAppended,
    ModelCompleted,
    ReplyAction,
    ReplyDelta,
    ReplyThinking,
    RunCompleted,
    RunError,
    ToolOutput,
)
from agency.contracts.events.blueprint import BlueprintConfig, SubagentsConfig
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.code import CodeAgent, SettingsError
from agency.services.agents.system import AgentSystem
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.replay.reexecute import reexecute
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents, make_system, running_agents

ABORTS: list[bool] = []


class Streamer(CodeAgent):
    class Settings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
        greeting: str = "Hello"
        model: str = ""

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.reply.thinking("answering " + message.content)
        ctx.reply.write(ctx.settings.greeting + ": ")
        async for delta in ctx.ai.stream():
            ctx.reply.write(delta)


class Counter(CodeAgent):
    tags = ("default",)

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        count = (ctx.state or {}).get("count", 0) + 1
        ctx.reply.action("write_file", {"path": "count.txt"})
        written = await ctx.tools.call("write_file", {"path": "count.txt", "content": str(count)})
        await ctx.set_state({"count": count, "last": message.content})
        return f"count {count} ({written})"


class Looker(CodeAgent):
    tags = ("lookup",)

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> str:
        return await ctx.tools.call("lookup", {"word": message.content})


class ToolLoop(CodeAgent):
    """The seed's agent with tools: the model picks tools, the agent runs them."""

    tags = ("default",)

    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        messages: list[ChatMessage] = [*ctx.conversation, message]
        for _ in range(4):
            answer = await ctx.ai.complete(messages=messages, tools=["write_todos"])
            messages.append(answer)
            if not answer.tool_calls:
                ctx.reply.write(answer.content)
                return
            for call in answer.tool_calls:
                ctx.reply.action(call.name, json.loads(call.arguments))
                output = await ctx.tools.call(call.name, json.loads(call.arguments))
                messages.append(
                    ChatMessage(role="tool", content=output, tool_call_id=call.id, name=call.name)
                )


class Failing(CodeAgent):
    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        ctx.reply.write("partial")
        raise ValueError("the handler broke on " + message.content)


_HANDLER = Failing.on_message.__code__
FAILING_AT = (
    f"{os.path.relpath(_HANDLER.co_filename)}, line {_HANDLER.co_firstlineno + 2}, in on_message"
)


class Slow(CodeAgent):
    async def on_message(self, message: ChatMessage, ctx: AgentContext) -> None:
        try:
            async for delta in ctx.ai.stream():
                ctx.reply.write(delta)
        finally:
            ABORTS.append(ctx.aborted)


def code_system() -> AgentSystem:
    return (
        make_system()
        .code_agent("streamer", Streamer, settings={"greeting": "Hi"})
        .code_agent("counter", Counter)
        .code_agent("failing", Failing)
        .code_agent("looker", Looker)
        .code_agent("toolloop", ToolLoop)
        .add_agent(
            BlueprintSpec(
                name="delegator",
                prompt="You delegate counting.",
                tags=("default",),
                config=BlueprintConfig(subagents=SubagentsConfig(subagents=("counter",))),
            )
        )
        .code_agent("slow", Slow)
    )


@pytest.fixture
async def code_agents(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> AsyncIterator[Agents]:
    async with running_agents(bus, nats_url, tenant, llm, system=code_system()) as running:
        yield running


def payloads(events: list[RecordedEvent], kind: type[Any]) -> list[Any]:
    return [e.payload for e in events if isinstance(e.payload, kind)]


def terminals(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events if e.type in RUN_TERMINAL_TYPES]


async def test_code_agent_streams_a_model_answer_and_replies(code_agents: Agents) -> None:
    key = "code-stream-" + code_agents.tenant
    code_agents.llm.script(key, [ScriptStep(content="a streamed answer", stream_delay_ms=60)])
    thread = await code_agents.thread("streamer")
    await code_agents.invoke(thread, f"hello {key}")
    events = await code_agents.wait_terminal(thread)

    assert terminals(events) == ["run.completed"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.type for e in events]
    assert kinds.index("model.started") < kinds.index("model.completed")
    assert payloads(events, ModelCompleted)[0].message.content == "a streamed answer"
    assert "".join(d.text for d in payloads(events, ReplyDelta)) == "Hi: a streamed answer"
    assert payloads(events, ReplyThinking)[0].text == f"answering hello {key}"
    assert payloads(events, RunCompleted)[0].result == "Hi: a streamed answer"
    roles = [(m.message.role, m.message.content) for m in payloads(events, MessageAppended)]
    assert roles == [("user", f"hello {key}"), ("assistant", "Hi: a streamed answer")]

    report = await reexecute([events], code_system())
    assert report.same, report
    assert report.compared > 0
    # Changed behaviour (another greeting) is a divergence.
    changed = make_system().code_agent("streamer", Streamer, settings={"greeting": "Yo"})
    assert not (await reexecute([events], changed)).same


async def test_code_agent_calls_an_internal_tool_and_keeps_state(code_agents: Agents) -> None:
    thread = await code_agents.thread("counter")
    await code_agents.invoke(thread, "first")
    await code_agents.wait_terminal(thread)
    await code_agents.invoke(thread, "second")
    events = await code_agents.wait_terminal(thread, count=2)

    assert terminals(events) == ["run.completed", "run.completed"]
    assert [s.value for s in payloads(events, AgentStateSet)] == [
        {"count": 1, "last": "first"},
        {"count": 2, "last": "second"},
    ]
    outputs = payloads(events, ToolOutput)
    assert [o.tool_name for o in outputs] == ["write_file", "write_file"]
    assert [a.name for a in payloads(events, ReplyAction)] == ["write_file", "write_file"]
    assert "tool.started" in [e.type for e in events]
    results = [r.result for r in payloads(events, RunCompleted)]
    assert results[1].startswith("count 2")
    # The fold of the log (what a replay rebuilds) holds the state and the file.
    state = fold(code_agents.tenant, thread, events)
    assert state.agent_state == {"count": 2, "last": "second"}
    assert state.file("count.txt") == "2"

    report = await reexecute([events], code_system())
    assert report.same, report


def test_settings_are_validated_when_registered() -> None:
    with pytest.raises(SettingsError, match="settings field 'greeting'") as raised:
        AgentSystem().code_agent("streamer", Streamer, settings={"greeting": 3})
    assert raised.value.field == "greeting"
    with pytest.raises(SettingsError, match="field 'colour'"):
        AgentSystem().code_agent("streamer", Streamer, settings={"colour": "red"})


async def test_settings_saved_for_an_agency_are_validated_at_invoke(code_agents: Agents) -> None:
    await code_agents.save_blueprint(
        BlueprintSpec(name="streamer", config=BlueprintConfig(extra={"settings": {"greeting": 7}}))
    )
    thread = await code_agents.thread("streamer")
    await code_agents.invoke(thread, "hello")
    events = await code_agents.wait_terminal(thread)
    error = payloads(events, RunError)[0]
    assert error.kind == "invalid_settings"
    assert "settings field 'greeting'" in error.error
    assert "model.started" not in [e.type for e in events]


async def test_an_exception_in_the_handler_ends_the_run_with_run_error(
    code_agents: Agents,
) -> None:
    thread = await code_agents.thread("failing")
    await code_agents.invoke(thread, "input")
    events = await code_agents.wait_terminal(thread)
    assert terminals(events) == ["run.error"]
    error = payloads(events, RunError)[0]
    assert error.kind == "internal_error"
    # Where in the handler it raised: the line of the app's code.
    assert error.error == f"{FAILING_AT}: ValueError: the handler broke on input"
    assert "".join(d.text for d in payloads(events, ReplyDelta)) == "partial"
    # The thread takes the next request.
    await code_agents.invoke(thread, "again")
    events = await code_agents.wait_terminal(thread, count=2)
    assert terminals(events) == ["run.error", "run.error"]


async def test_cancel_mid_stream_aborts_the_handler(code_agents: Agents) -> None:
    key = "code-slow-" + code_agents.tenant
    words = " ".join(f"word{i}" for i in range(200))
    code_agents.llm.script(key, [ScriptStep(content=words, stream_delay_ms=100)])
    ABORTS.clear()
    thread = await code_agents.thread("slow")
    await code_agents.invoke(thread, key)
    # Cancel once the agent has shown part of the answer.
    await code_agents.wait_for(thread, lambda es: "reply.delta" in [e.type for e in es])
    await code_agents.cancel(thread)
    events = await code_agents.wait_terminal(thread)
    assert terminals(events) == ["run.canceled"], payloads(events, RunError)
    assert "model.completed" not in [e.type for e in events]

    async def aborted() -> None:
        assert ABORTS == [True]

    await assert_eventually(aborted)
    settled = await code_agents.events(thread)
    # Nothing after the cancel but its checkpoint.
    assert [e.type for e in settled if e.type != "checkpoint.saved"][-1] == "run.canceled"
    report = await reexecute([settled], code_system())
    assert report.same, report


async def test_an_external_tool_runs_in_the_tools_service(code_agents: Agents) -> None:
    thread = await code_agents.thread("looker")
    await code_agents.invoke(thread, "agent")
    events = await code_agents.wait_terminal(thread)
    assert terminals(events) == ["run.completed"]
    assert "tool.requested" in [e.type for e in events]
    assert payloads(events, RunCompleted)[0].result == "definition of agent"


async def test_a_fork_of_a_code_agent_thread_keeps_its_state(code_agents: Agents) -> None:
    thread = await code_agents.thread("counter")
    await code_agents.invoke(thread, "first")
    original = await code_agents.wait_terminal(thread)
    fork_id = new_id()
    await code_agents.bus.commands.send(
        code_agents.tenant,
        ForkThread(
            agency_id=code_agents.agency,
            thread_id=thread,
            at_seq=len(original),
            fork_thread_id=fork_id,
        ),
    )
    await code_agents.wait_for(fork_id, lambda es: len(es) >= len(original))
    await code_agents.invoke(fork_id, "in the fork")
    forked = await code_agents.wait_terminal(fork_id, count=2)
    assert terminals(forked) == ["run.completed", "run.completed"]
    assert fold(code_agents.tenant, fork_id, forked).agent_state == {
        "count": 2,
        "last": "in the fork",
    }
    assert fold(code_agents.tenant, thread, await code_agents.events(thread)).agent_state == {
        "count": 1,
        "last": "first",
    }


async def test_the_example_code_agent_runs(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    from examples.code_agent import system

    key = "code-example-" + tenant
    llm.script(key, [ScriptStep(content="Noted.")])
    async with running_agents(bus, nats_url, tenant, llm, system=system) as agents:
        thread = await agents.thread("notetaker")
        await agents.invoke(thread, f"remember {key}")
        events = await agents.wait_terminal(thread)
    assert payloads(events, RunCompleted)[0].result == "Noted."
    state = fold(tenant, thread, events)
    assert state.agent_state == {"notes": 1}
    assert state.file("notes/1.md") == "Noted."
    report = await reexecute([events], system)
    assert report.same, report


async def test_a_blueprint_agent_delegates_to_a_code_agent(code_agents: Agents) -> None:
    key = "code-sub-" + code_agents.tenant
    task = {"name": "task", "arguments": {"description": "count this", "subagentType": "counter"}}
    code_agents.llm.script(
        key, [ScriptStep(tool_calls=[task]), ScriptStep(content="the counter answered")]
    )
    parent = await code_agents.thread("delegator")
    await code_agents.invoke(parent, key)
    events = await code_agents.wait_terminal(parent, timeout=30)
    assert terminals(events) == ["run.completed"]
    tool_messages = [
        m.message.content for m in payloads(events, MessageAppended) if m.message.role == "tool"
    ]
    assert len(tool_messages) == 1 and "count 1 (wrote 1 characters" in tool_messages[0]


async def test_a_code_agent_runs_the_tools_the_model_calls(code_agents: Agents) -> None:
    key = "code-loop-" + code_agents.tenant
    todos = {"todos": [{"content": "count", "status": "in_progress"}]}
    code_agents.llm.script(
        key,
        [
            ScriptStep(tool_calls=[{"name": "write_todos", "arguments": todos}]),
            ScriptStep(content="planned"),
        ],
    )
    thread = await code_agents.thread("toolloop")
    await code_agents.invoke(thread, key)
    events = await code_agents.wait_terminal(thread)
    assert terminals(events) == ["run.completed"]
    assert payloads(events, RunCompleted)[0].result == "planned"
    assert [e.type for e in events].count("model.completed") == 2
    state = fold(code_agents.tenant, thread, events)
    assert [t.content for t in state.todos] == ["count"]
    report = await reexecute([events], code_system())
    assert report.same, report


async def test_queued_runs_of_a_code_agent_and_a_model_agent_hand_the_thread_over(
    code_agents: Agents,
) -> None:
    """A model agent's thread, then a queued run of a code agent, then one of the model
    agent again: each starts as its own blueprint, switched to when it starts."""
    key = "code-handover-" + code_agents.tenant
    # By the conversation's assistant messages: the worker's, the counter's, the worker's.
    steps = [ScriptStep(content="worker first", delay_ms=500), ScriptStep(content="unused")]
    code_agents.llm.script(key, [*steps, ScriptStep(content="worker back")])
    thread = await code_agents.thread("worker")
    first = await code_agents.invoke(thread, f"start {key}")
    await code_agents.wait_for(thread, lambda es: "model.started" in [e.type for e in es])
    for agent_type, text in (("counter", "count this"), ("worker", f"again {key}")):
        await code_agents.bus.commands.send(
            code_agents.tenant,
            InvokeThread(
                agency_id=code_agents.agency,
                thread_id=thread,
                run_id="run_" + new_id(),
                messages=(ChatMessage(role="user", content=text),),
                agent_type=agent_type,
            ),
        )
    events = await code_agents.wait_terminal(thread, count=3)
    assert terminals(events) == ["run.completed"] * 3
    switches = [(s.from_agent_type, s.to_agent_type) for s in payloads(events, BlueprintSwitched)]
    assert switches == [("worker", "counter"), ("counter", "worker")]
    results = [r.result for r in payloads(events, RunCompleted)]
    assert results[0] == "worker first" and results[1].startswith("count 1")
    assert results[2] == "worker back"
    assert payloads(events, RunCompleted)[0].run_id == first
    # Re-executed from the log, the switches are decided where they were.
    report = await reexecute([events], code_system())
    assert report.same, report
