"""Subagent blueprints defined inline in `config.subagents.subagents` (seed 000's
`SubagentsConfig`: whole `AgentBlueprint`s) run as saved ones do, through `task` and
`subagent_create`, and replay, re-execute and fork like them."""

from __future__ import annotations

from typing import Any

import msgspec

from agency.contracts.events import (
    BlueprintSpec,
    ModelStarted,
    SubagentSpawned,
    ThreadCreated,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.blueprint_body import SaveBlueprintBody
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.runtime.replay.reexecute import reexecute
from agency.services.threads.fork import fork_thread
from tests.runtime.conftest import Agents, make_system

# Seed 000's shapes: an `AgentBlueprint` (`name`, `description`, `prompt`, `tags`,
# `model`) inline in the subagents middleware's config, and its `task` input.
SECURITY_AGENT = {
    "name": "security-agent",
    "description": "Analyzes security logs.",
    "prompt": "You are a security analyst. Inline blueprint.",
    "tags": ["security"],
    "model": "openai:gpt-4.1-mini",
}
HELPER = {
    "name": "helper",
    "description": "Helps with follow-up questions.",
    "prompt": "You are an inline helper.",
    "tags": ["default"],
    "model": "openai:gpt-4.1-nano",
    "resumable": True,
}


def manager_agent(name: str, *entries: dict[str, Any]) -> BlueprintSpec:
    """A blueprint as a client writes it (`POST /agency/{a}/blueprints`), as the API reads it."""
    body = {
        "name": name,
        "description": "Does things.",
        "prompt": "You are a manager.",
        "tags": ["default"],
        "config": {"subagents": {"subagents": list(entries)}},
    }
    return msgspec.convert(body, SaveBlueprintBody).spec()


def task(description: str, kind: str = "security-agent") -> ScriptToolCall:
    return ScriptToolCall(name="task", arguments={"description": description, "subagentType": kind})


def spawned(events: list[RecordedEvent]) -> list[str]:
    return [e.payload.child_thread_id for e in events if isinstance(e.payload, SubagentSpawned)]


def models(events: list[RecordedEvent]) -> list[str]:
    return [e.payload.model for e in events if isinstance(e.payload, ModelStarted)]


def system_prompts(agents: Agents, text: str) -> list[str]:
    """The system messages of the model requests whose messages mention `text`."""
    return [
        str(m["content"])
        for r in agents.llm.requests
        if any(text in str(m.get("content")) for m in r["messages"])
        for m in r["messages"]
        if m["role"] == "system"
    ]


def terminal(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events if e.type in RUN_TERMINAL_TYPES]


async def inline_task_run(agents: Agents) -> tuple[str, str, BlueprintSpec]:
    """A manager whose `security-agent` is inline delegates one task to it; the agency also
    saves a `security-agent` of its own, which the inline one wins over."""
    key = "inline-" + agents.tenant
    manager = manager_agent("manager-agent", SECURITY_AGENT)
    await agents.save_blueprint(manager)
    await agents.save_blueprint(BlueprintSpec(name="security-agent", prompt="The saved one."))
    agents.llm.script(key, [
        ScriptStep(tool_calls=(task(f"Analyze top IPs in this window... {key}"),)),
        ScriptStep(content="the analysis is in"),
    ])  # fmt: skip
    agents.llm.script(f"Analyze top IPs in this window... {key}", [ScriptStep(content="3 IPs")])
    parent = await agents.thread("manager-agent")
    await agents.invoke(parent, key)
    events = await agents.wait_terminal(parent, timeout=30)
    assert terminal(events) == ["run.completed"]
    (child,) = spawned(events)
    return parent, child, manager


async def test_task_spawns_a_child_running_the_inline_blueprint(agents: Agents) -> None:
    parent, child, manager = await inline_task_run(agents)
    child_events = await agents.wait_terminal(child)
    assert terminal(child_events) == ["run.completed"]
    created = child_events[0].payload
    assert isinstance(created, ThreadCreated) and created.agent_type == "security-agent"
    inline = manager.config.subagents.inline_blueprints()  # type: ignore[union-attr]
    assert created.blueprint == inline["security-agent"]
    assert models(child_events) == ["openai:gpt-4.1-mini"]
    prompts = system_prompts(agents, f"Analyze top IPs in this window... inline-{agents.tenant}")
    assert any("Inline blueprint." in p for p in prompts), prompts
    assert not any("The saved one." in p for p in prompts)
    # The entry's description is the child's title in the parent's registry.
    (link,) = [e.payload for e in await agents.events(parent) if e.type == "subagent.spawned"]
    assert isinstance(link, SubagentSpawned) and link.title == "Analyzes security logs."
    tool_messages = [
        e.payload.message.content  # type: ignore[attr-defined]
        for e in await agents.events(parent)
        if e.type == "message.appended" and e.payload.message.role == "tool"  # type: ignore[attr-defined]
    ]
    assert tool_messages == ["3 IPs"]


async def test_subagent_create_and_message_use_an_inline_resumable_blueprint(
    agents: Agents,
) -> None:
    key = "inline-create-" + agents.tenant
    await agents.save_blueprint(manager_agent("manager-agent", HELPER))
    create = ScriptToolCall(
        name="subagent_create",
        arguments={"name": "h1", "subagentType": "helper", "message": f"first {key}"},
    )
    steps = [ScriptStep(tool_calls=(create,)), ScriptStep(content="created")]
    agents.llm.script(key, steps)
    agents.llm.script(f"first {key}", [
        ScriptStep(content="first answer"),
        ScriptStep(content="second answer"),
    ])  # fmt: skip
    parent = await agents.thread("manager-agent")
    await agents.invoke(parent, key)
    events = await agents.wait_for(parent, lambda es: bool(spawned(es)), timeout=30)
    (child,) = spawned(events)
    child_events = await agents.wait_terminal(child)
    assert terminal(child_events) == ["run.completed"]
    assert models(child_events) == ["openai:gpt-4.1-nano"]
    assert any("You are an inline helper." in p for p in system_prompts(agents, f"first {key}"))

    # A later message to the same child runs the inline blueprint again. First the parent
    # takes the child's report and ends whatever run it started: its script is extended
    # below, and the fake counts the steps of the conversation.
    await agents.wait_for(
        parent,
        lambda es: (
            any(e.type == "subagent.completed" for e in es)
            and sum(e.type == "run.started" for e in es)
            == sum(e.type in RUN_TERMINAL_TYPES for e in es)
        ),
        timeout=30,
    )
    message = ScriptToolCall(
        name="subagent_message", arguments={"reference": child, "message": f"second {key}"}
    )
    steps += [
        ScriptStep(content="noted"),  # the run the child's report started, ended above
        ScriptStep(tool_calls=(message,)),
        ScriptStep(content="messaged"),
        ScriptStep(content="got it"),
    ]
    agents.llm.script(key, steps)
    await agents.invoke(parent, f"{key} again")
    child_events = await agents.wait_terminal(child, count=2, timeout=30)
    assert terminal(child_events) == ["run.completed", "run.completed"]
    assert models(child_events) == ["openai:gpt-4.1-nano"] * 2
    assert any("You are an inline helper." in p for p in system_prompts(agents, f"second {key}"))


async def test_a_tree_with_an_inline_child_re_executes_to_the_same_events(
    agents: Agents,
) -> None:
    parent, child, _ = await inline_task_run(agents)
    await agents.wait_terminal(child)
    agency_events = await agents.bus.store.read(agents.tenant, "agency", agents.agency)
    report = await reexecute(
        [await agents.events(parent), await agents.events(child)],
        make_system(),
        agency_events=agency_events,
    )
    assert report.same, [c.divergence for c in report.comparisons]
    assert len(report.comparisons) == 2 and all(c.compared for c in report.comparisons)
    # The child's own record is enough: its blueprint is in its `thread.created`.
    alone = await reexecute([await agents.events(child)], make_system())
    assert alone.same, [c.divergence for c in alone.comparisons]


async def test_a_fork_of_a_parent_forks_its_inline_child_runnable(agents: Agents) -> None:
    key = "inline-" + agents.tenant
    parent, child, _ = await inline_task_run(agents)
    await agents.wait_terminal(child)
    events = await agents.events(parent)

    forked = await fork_thread(agents.bus, agents.tenant, parent, events[-1].seq)
    fork_child = forked.children[child]
    created = (await agents.events(fork_child))[0].payload
    assert isinstance(created, ThreadCreated) and created.blueprint is not None
    assert created.blueprint.prompt == SECURITY_AGENT["prompt"]

    # The forked child runs its inline blueprint when invoked, as the original would.
    agents.llm.script(f"after the fork {key}", [ScriptStep(content="forked answer")])
    await agents.invoke(fork_child, f"after the fork {key}")
    fork_events = await agents.wait_terminal(fork_child, count=2, timeout=30)
    assert terminal(fork_events)[-1] == "run.completed"
    assert models(fork_events) == ["openai:gpt-4.1-mini"] * 2
    prompts = system_prompts(agents, f"after the fork {key}")
    assert any("Inline blueprint." in p for p in prompts), prompts
