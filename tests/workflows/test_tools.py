"""The context tools members get, each answering from (or writing to) the shared context;
and a member's thread doing what any thread does: a subagent, and a fork."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import pytest

from agency.contracts.events import (
    BlueprintSpec,
    SubagentCompleted,
    SubagentSpawned,
    ToolError,
    ToolOutput,
)
from agency.contracts.events.blueprint import BlueprintConfig, SubagentsConfig
from agency.domain.workflow_decisions import resource_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.threads.fork import fork_thread
from tests.runtime.conftest import running_agents
from tests.workflows.conftest import SERVICES, Workflows
from tests.workflows.test_context import blueprint, tool


def results(events: list[RecordedEvent]) -> list[tuple[str, str]]:
    """(tool, output or `error: …`) of a thread's tool calls, in order."""
    found = []
    for e in events:
        match e.payload:
            case ToolOutput(tool_name=name, output=output):
                found.append((name, output))
            case ToolError(tool_name=name, error=error):
                found.append((name, "error: " + error))
    return found


async def test_context_tools_read_and_write_the_shared_context(workflows: Workflows) -> None:
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"scribe-{t}", [
        tool("team_doc_write", path="plan.md", content="1. draft"),
        tool("team_doc_list"),
        tool("team_doc_read", path="plan.md"),
        tool("team_doc_read", path="nope.md"),
        tool("resource_put", content="a large blob"),
        tool("channel_send", message="The plan is in plan.md.", to=["checker"]),
        tool("channel_send", message=""),
        tool("my_inbox"),
        tool("channel_read", limit=2),
        ScriptStep(content="Sent to the checker."),
    ])  # fmt: skip
    llm.script(f"checker-{t}", [
        tool("my_inbox"),
        tool("channel_read", limit=2),
        tool("resource_get", id=resource_id("a large blob")),
        tool("resource_get", id="sha256:missing"),
        ScriptStep(content="Checked."),
    ])  # fmt: skip
    wf = await workflows.create("notes", {n: blueprint(f"{n}-{t}") for n in ("scribe", "checker")})
    await workflows.post(wf, "@scribe start the plan")
    state = await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 4)
    store = workflows.bus.store
    scribe = results(await store.read(t, "thread", state.members["scribe"].thread_id))
    checker = results(await store.read(t, "thread", state.members["checker"].thread_id))

    sent = next(m for m in state.messages if m.content == "The plan is in plan.md.")
    assert sent.sender == "scribe" and sent.mentions == ("checker",) and sent.hop == 1
    assert scribe[:-1] == [
        ("team_doc_write", "wrote plan.md (8 characters)"),
        ("team_doc_list", "plan.md (by @scribe, 8 chars)"),
        ("team_doc_read", "1. draft"),
        ("team_doc_read", "error: no document 'nope.md'; documents: plan.md"),
        ("resource_put", resource_id("a large blob")),
        ("channel_send", f"posted message {sent.message_id}"),
        ("channel_send", "error: message must not be empty"),
        ("my_inbox", f"[{state.messages[0].seq}] @user: @scribe start the plan"),
    ]
    # The latest two messages (the checker may have answered already): the one it sent.
    assert scribe[-1][0] == "channel_read" and len(scribe[-1][1].splitlines()) == 2
    assert f"[{sent.seq}] @scribe: The plan is in plan.md." in scribe[-1][1].splitlines()
    assert checker[0] == ("my_inbox", f"[{sent.seq}] @scribe: The plan is in plan.md.")
    assert checker[1][0] == "channel_read"
    assert f"[{sent.seq}] @scribe: The plan is in plan.md." in checker[1][1].splitlines()
    assert checker[2:] == [
        ("resource_get", "a large blob"),
        ("resource_get", "error: no resource 'sha256:missing'"),
    ]
    # The message sent by the tool was acted on once; both members answered once.
    assert Counter(m.sender for m in state.messages) == {"user": 1, "scribe": 2, "checker": 1}
    assert state.documents["plan.md"] == ("1. draft", "scribe")


@pytest.fixture
async def with_subagents(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> AsyncIterator[Workflows]:
    async with running_agents(
        bus, nats_url, tenant, llm, services=(*SERVICES, "subagents")
    ) as agents:
        yield Workflows(agents)


async def test_a_member_delegates_to_a_subagent_and_its_thread_forks(
    with_subagents: Workflows,
) -> None:
    workflows = with_subagents
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"lead-{t}", [
        tool("task", description=f"Summarise the plan (lead-{t}-child)", subagentType="worker"),
        ScriptStep(content="The worker summarised it."),
    ])  # fmt: skip
    llm.script(f"lead-{t}-child", [ScriptStep(content="The plan, summarised.")])
    lead = BlueprintSpec(
        name="lead",
        prompt=f"Your script is lead-{t}.",
        tags=("default",),
        config=BlueprintConfig(subagents=SubagentsConfig(subagents=("worker",))),
    )
    wf = await workflows.create("team", {"lead": lead})
    await workflows.post(wf, "@lead get the plan summarised")
    state = await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 2)
    assert state.messages[-1].sender == "lead"
    assert state.messages[-1].content == "The worker summarised it."
    thread = state.members["lead"].thread_id
    events = await workflows.bus.store.read(t, "thread", thread)
    [spawned] = [e.payload for e in events if isinstance(e.payload, SubagentSpawned)]
    [completed] = [e.payload for e in events if isinstance(e.payload, SubagentCompleted)]
    assert spawned.subagent_type == "worker" and completed.outcome == "completed"
    assert completed.report == "The plan, summarised."

    # The member's thread forks like any thread: its history, children included.
    forked = await fork_thread(workflows.bus, t, thread, events[-1].seq)
    copy = await workflows.bus.store.read(t, "thread", forked.thread_id)
    assert [e.type for e in copy] == [e.type for e in events]
    assert list(forked.children) == [spawned.child_thread_id]
