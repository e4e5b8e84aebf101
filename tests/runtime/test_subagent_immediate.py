"""Immediate subagents: spawned as soon as a prompt becomes active, before its first step."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agency.contracts.events import BlueprintSpec, SubagentCompleted, SubagentSpawned
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    ImmediateConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.ids import new_id
from agency.domain.thread_state import fold
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.middleware import Middleware, MiddlewareContext, ModelPlan
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.runtime.replay.reexecute import reexecute
from agency.services.threads.fork import fork_thread
from tests.helpers import settled
from tests.runtime.conftest import Agents, make_system, running_agents


def unique(prefix: str) -> str:
    return prefix + new_id().lower()[-10:]


def spawned(events: list[RecordedEvent]) -> list[SubagentSpawned]:
    return [e.payload for e in events if isinstance(e.payload, SubagentSpawned)]


def first_index(events: list[RecordedEvent], kind: str) -> int:
    return next(i for i, e in enumerate(events) if e.type == kind)


def requests_with(agents: Agents, text: str) -> list[dict[str, Any]]:
    """The model requests whose system prompt holds `text`."""
    return [r for r in agents.llm.requests if text in str(r["messages"][0])]


async def agent(agents: Agents, name: str, *entries: SubagentEntry, **fields: Any) -> BlueprintSpec:
    config = fields.pop("config", BlueprintConfig())
    if entries:
        config = BlueprintConfig(
            subagents=SubagentsConfig(subagents=entries), callable_agents=config.callable_agents
        )
    fields.setdefault("tags", ("default",))
    spec = BlueprintSpec(name=name, prompt=f"{name} prompt", config=config, **fields)
    await agents.save_blueprint(spec)
    return spec


async def test_an_immediate_child_runs_at_thread_creation_before_the_first_model_call(
    agents: Agents,
) -> None:
    child = await agent(agents, unique("bootchild"))
    parent = await agent(
        agents, unique("bootparent"), SubagentEntry(name=child.name, immediate=True)
    )
    agents.llm.script(f"{child.name} prompt", [ScriptStep(content="child checked in")])
    # The bootstrap call is an assistant turn: the parent's first model step is step 1.
    agents.llm.script(
        f"{parent.name} prompt", [ScriptStep(content="unused"), ScriptStep(content="parent done")]
    )
    thread = await agents.thread(parent.name)
    await agents.invoke(thread, "start the day")
    events = await agents.wait_terminal(thread, timeout=30)

    assert settled(events)[-1].type == "run.completed"
    (link,) = spawned(events)
    assert link.subagent_type == child.name
    # The child reported before the parent's first model call.
    assert first_index(events, "subagent.completed") < first_index(events, "model.started")
    (first,) = requests_with(agents, f"{parent.name} prompt")
    tool_messages = [m for m in first["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["child checked in"]
    # The child got the request that started the parent's run as its task.
    (child_request,) = requests_with(agents, f"{child.name} prompt")
    assert "start the day" in str(child_request["messages"])
    # The bootstrap is in the log like any delegation: re-executing the tree reproduces it.
    child_events = await agents.events(link.child_thread_id)
    agency_events = await agents.bus.store.read(agents.tenant, "agency", agents.agency)
    report = await reexecute([events, child_events], make_system(), agency_events=agency_events)
    assert report.same, report.comparisons


async def test_immediate_execution_is_recursive(agents: Agents) -> None:
    leaf = await agent(agents, unique("leaf"))
    middle = await agent(agents, unique("middle"), SubagentEntry(name=leaf.name, immediate=True))
    root = await agent(agents, unique("root"), SubagentEntry(name=middle.name, immediate=True))
    agents.llm.script(f"{leaf.name} prompt", [ScriptStep(content="leaf report")])
    agents.llm.script(
        f"{middle.name} prompt", [ScriptStep(content="unused"), ScriptStep(content="middle report")]
    )
    agents.llm.script(
        f"{root.name} prompt", [ScriptStep(content="unused"), ScriptStep(content="root done")]
    )
    thread = await agents.thread(root.name)
    await agents.invoke(thread, "go deep")
    events = await agents.wait_terminal(thread, timeout=45)

    assert settled(events)[-1].type == "run.completed"
    (middle_link,) = spawned(events)
    middle_events = await agents.events(middle_link.child_thread_id)
    (leaf_link,) = spawned(middle_events)
    assert leaf_link.subagent_type == leaf.name
    assert first_index(middle_events, "subagent.completed") < first_index(
        middle_events, "model.started"
    )
    (middle_first,) = requests_with(agents, f"{middle.name} prompt")
    assert [m["content"] for m in middle_first["messages"] if m["role"] == "tool"] == [
        "leaf report"
    ]
    (root_first,) = requests_with(agents, f"{root.name} prompt")
    assert [m["content"] for m in root_first["messages"] if m["role"] == "tool"] == [
        "middle report"
    ]


async def test_an_immediate_child_runs_after_a_handoff_to_its_prompt(agents: Agents) -> None:
    scout = await agent(agents, unique("scout"))
    desk = await agent(
        agents,
        unique("desk"),
        SubagentEntry(name=scout.name, immediate=ImmediateConfig()),
        expose_as_tool=True,
        tool_description="Hand over to the desk.",
    )
    front = await agent(
        agents, unique("front"), config=BlueprintConfig(callable_agents=(desk.name,))
    )
    handoff = {"name": desk.name, "arguments": {"message": "over to the desk"}}
    agents.llm.script(f"{front.name} prompt", [ScriptStep(tool_calls=[handoff])])
    agents.llm.script(f"{scout.name} prompt", [ScriptStep(content="scout findings")])
    # Turns before the desk's first step: the handoff, then the bootstrap call.
    agents.llm.script(
        f"{desk.name} prompt",
        [ScriptStep(content="unused"), ScriptStep(content="unused"), ScriptStep(content="desk")],
    )
    thread = await agents.thread(front.name)
    await agents.invoke(thread, "a question for the desk")
    events = await agents.wait_terminal(thread, timeout=30)

    assert (
        settled(events)[-1].type == "run.completed" and settled(events)[-1].payload.result == "desk"
    )  # type: ignore[attr-defined]
    # Nothing at the front's activation (it has no immediate entries); the scout after the switch.
    (link,) = spawned(events)
    assert link.subagent_type == scout.name
    switched = first_index(events, "thread.blueprint_switched")
    completed = [i for i, e in enumerate(events) if isinstance(e.payload, SubagentCompleted)]
    ticks = [i for i, e in enumerate(events) if e.type == "model.started"]
    assert len(ticks) == 2 and ticks[0] < switched < completed[0] < ticks[1]
    (desk_first,) = requests_with(agents, f"{desk.name} prompt")
    assert "scout findings" in [m["content"] for m in desk_first["messages"] if m["role"] == "tool"]


SEEN_SCOPES: dict[str, dict[str, str]] = {}


class ScopeProbe(Middleware):
    """Records the scoped variables a thread's middleware sees."""

    name = "scope-probe"
    tags = ("scope-probe",)

    async def before_model(self, ctx: MiddlewareContext, plan: ModelPlan) -> None:
        SEEN_SCOPES[ctx.state.thread_id] = ctx.state.scoped_env()


@pytest.fixture
async def probed(bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer) -> AsyncIterator[Agents]:
    system = make_system().use(ScopeProbe())
    async with running_agents(bus, nats_url, tenant, llm, system=system) as running:
        yield running


async def test_scoped_env_reaches_the_child_but_no_model_and_hints_name_it(
    probed: Agents, monkeypatch: pytest.MonkeyPatch
) -> None:
    agents = probed
    suffix = new_id()
    name_var, task_var, secret_var = (f"AGENCY_TEST_{k}_{suffix}" for k in ("NAME", "TASK", "KEY"))
    secret = "sk-scoped-" + new_id()
    monkeypatch.setenv(name_var, "scout-one")
    monkeypatch.setenv(task_var, "map the territory")
    monkeypatch.setenv(secret_var, secret)
    # A saved blueprint reads the runtime's variables the operator exposes to tenants.
    monkeypatch.setenv("AGENCY_TENANT_ENV", f"{name_var},{task_var},{secret_var}")
    child = await agent(agents, unique("scoped"), tags=("default", "scope-probe"))
    immediate = ImmediateConfig(
        name_env=name_var, description_env=task_var, scoped_env=(secret_var,)
    )
    entry = SubagentEntry(name=child.name, resumable=True, blocking=True, immediate=immediate)
    parent = await agent(agents, unique("holder"), entry, tags=("default", "scope-probe"))
    agents.llm.script(f"{child.name} prompt", [ScriptStep(content="territory mapped")])
    agents.llm.script(
        f"{parent.name} prompt", [ScriptStep(content="unused"), ScriptStep(content="holder done")]
    )
    thread = await agents.thread(parent.name)
    await agents.invoke(thread, "begin")
    events = await agents.wait_terminal(thread, timeout=30)

    assert settled(events)[-1].type == "run.completed"
    (link,) = spawned(events)
    # The scoped value is in the child's scope, for its middleware...
    assert SEEN_SCOPES[link.child_thread_id] == {secret_var: secret}
    assert SEEN_SCOPES[thread] == {}
    # ...never in a model's request, nor in clear in any event of the tree.
    assert secret not in json.dumps(agents.llm.requests)
    child_events = await agents.events(link.child_thread_id)
    for event in (*events, *child_events):
        assert secret not in json.dumps(msgspec.to_builtins(event.envelope.payload))
    # The hints are model-visible: the child's name and task come from them.
    (entry_state,) = fold(agents.tenant, thread, events).children
    assert entry_state.name == "scout-one" and entry_state.resumable
    (child_request,) = requests_with(agents, f"{child.name} prompt")
    assert "map the territory" in str(child_request["messages"])
    assert "begin" not in str(child_request["messages"])


async def test_a_fork_after_the_bootstrap_keeps_it_and_does_not_run_it_again(
    agents: Agents,
) -> None:
    child = await agent(agents, unique("forkchild"))
    parent = await agent(
        agents, unique("forkparent"), SubagentEntry(name=child.name, immediate=True)
    )
    agents.llm.script(f"{child.name} prompt", [ScriptStep(content="child ran once")])
    agents.llm.script(
        f"{parent.name} prompt",
        [ScriptStep(content="unused"), ScriptStep(content="first"), ScriptStep(content="again")],
    )
    thread = await agents.thread(parent.name)
    await agents.invoke(thread, "first request")
    original = await agents.wait_terminal(thread, timeout=30)

    forked = await fork_thread(agents.bus, agents.tenant, thread, settled(original)[-1].seq)
    await agents.invoke(forked.thread_id, "second request")
    events = await agents.wait_terminal(forked.thread_id, count=2, timeout=30)
    assert (
        settled(events)[-1].type == "run.completed"
        and settled(events)[-1].payload.result == "again"
    )  # type: ignore[attr-defined]
    # The bootstrap came with the copy; the fork's own run spawned nothing.
    assert len(spawned(events)) == 1
    assert sum(e.type == "subagent.requested" for e in events) == 1
    last = requests_with(agents, f"{parent.name} prompt")[-1]
    assert "child ran once" in str(last["messages"]) and "second request" in str(last["messages"])
