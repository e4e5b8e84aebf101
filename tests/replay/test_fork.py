"""Forking: a new thread from a thread's history, invokable, with its running children."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import asyncpg
import httpx
import pytest
from litestar import Litestar
from litestar.di import Provide

from agency.contracts.events import (
    BlueprintSwitched,
    HitlInterrupt,
    MessageAppended,
    RunCanceled,
    RunCompleted,
    RunStarted,
    SubagentCompleted,
    SubagentSpawned,
    ThreadCreated,
    ToolError,
)
from agency.domain.child_naming import child_thread_id
from agency.domain.thread_state import fold
from agency.infra.jetstream.records import RecordedEvent
from agency.services.api.auth import AuthMiddleware, provide_principal
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.routes_fork import FORK_ROUTES
from agency.services.cli.replay_cmd import fork_over_http
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.threads.fork import fork_thread
from agency.services.threads.fork_copies import FORKED_MID_RUN
from tests.helpers import settled
from tests.replay.conftest import call, child_thread, cli
from tests.runtime.conftest import Agents, make_system


def types(events: list[RecordedEvent]) -> list[str]:
    return [e.type for e in events]


def task(description: str) -> ScriptToolCall:
    return call("task", description=description, subagentType="worker")


async def test_a_fork_copies_the_history_and_takes_a_different_message(agents: Agents) -> None:
    key = "fork-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="first answer")])
    thread = await agents.thread()
    await agents.invoke(thread, key)
    original = await agents.wait_terminal(thread)

    forked = await fork_thread(agents.bus, agents.tenant, thread, original[-1].seq)
    copy = await agents.events(forked.thread_id)
    assert types(copy) == types(original)
    # Every copy points back at its original, in a tree of its own.
    assert [e.envelope.causation_id for e in copy] == [e.envelope.event_id for e in original]
    assert {e.envelope.correlation_id for e in copy} == {forked.thread_id}
    created = copy[0].payload
    assert isinstance(created, ThreadCreated) and created.agent_type == "worker"
    assert created.request["forkedFrom"] == thread and forked.canceled_runs == {}

    second = key + "-fork"
    agents.llm.script(second, [ScriptStep(content="unused"), ScriptStep(content="second answer")])
    await agents.invoke(forked.thread_id, second)
    events = await agents.wait_terminal(forked.thread_id, count=2)
    last = settled(events)[-1].payload
    assert isinstance(last, RunCompleted) and last.result == "second answer"
    contents = [e.payload.message.content for e in events if isinstance(e.payload, MessageAppended)]
    assert contents == [key, "first answer", second, "second answer"]
    assert types(await agents.events(thread)) == types(original)  # the original is untouched


async def test_a_fork_inside_a_run_ends_it_and_stays_invokable(
    agents: Agents, data_dir: Path
) -> None:
    key = "fork-mid-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(call("lookup", word="held"),)),
        ScriptStep(content="approved and done"),
    ])  # fmt: skip
    thread = await agents.thread("approver")
    await agents.invoke(thread, key)
    paused = await agents.wait_for(thread, lambda es: "run.paused" in types(es))
    at = next(e.seq for e in paused if isinstance(e.payload, HitlInterrupt))

    ran = await cli("fork", thread, "--at-seq", str(at), "--data-dir", str(data_dir))
    assert ran.status == 0, ran.err
    fork = ran.lines[0].rsplit(" ", 1)[-1]
    assert ran.lines[0] == f"forked {thread} at seq {at}: new thread {fork}"
    copy = await agents.events(fork)
    assert types(copy)[:at] == types(paused)[:at]
    # The open call is answered and the run canceled: the fork is idle.
    answer, end = copy[-2].payload, copy[-1].payload
    assert isinstance(answer, MessageAppended) and answer.message.role == "tool"
    assert isinstance(end, RunCanceled) and end.reason == FORKED_MID_RUN
    assert fold(agents.tenant, fork, copy).active_run is None

    # The original still waits for its person; the fork takes a new request.
    await agents.approve(thread, approved=True)
    assert settled(await agents.wait_terminal(thread))[-1].type == "run.completed"
    again = key + "-again"
    agents.llm.script(again, [ScriptStep(content="x"), ScriptStep(content="fresh start")])
    await agents.invoke(fork, again)
    events = await agents.wait_terminal(fork, count=2)
    assert settled(events)[-1].type == "run.completed"
    assert "tool.started" not in types(events)


async def test_a_requested_call_unanswered_at_the_cut_is_never_run_for_the_fork(
    agents: Agents,
) -> None:
    key = "fork-tool-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(call("lookup", word="once"),)),
        ScriptStep(content="done"),
    ])  # fmt: skip
    thread = await agents.thread()
    await agents.invoke(thread, key)
    original = await agents.wait_terminal(thread)
    at = next(e.seq for e in original if e.type == "tool.requested")

    forked = await fork_thread(agents.bus, agents.tenant, thread, at)
    copy = await agents.events(forked.thread_id)
    errors = [e.payload for e in copy if isinstance(e.payload, ToolError)]
    assert [e.error for e in errors] == [f"not run: {FORKED_MID_RUN}"]
    assert copy[-1].type == "run.canceled"
    # Once the fork has run again, the tools service has long seen the copied request.
    agents.llm.script(
        key + "-more", [ScriptStep(content="a"), ScriptStep(content="b"), ScriptStep(content="c")]
    )
    await agents.invoke(forked.thread_id, key + "-more")
    events = await agents.wait_terminal(forked.thread_id, count=2)
    assert "tool.started" not in types(events) and "tool.output" not in types(events)


async def test_a_fork_of_a_parent_forks_its_running_children(agents: Agents) -> None:
    key = "fork-tree-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="parent done")])
    agents.llm.script(key + "-child", [ScriptStep(content="child done", delay_ms=4000)])
    parent = await agents.thread()
    child = await child_thread(agents, parent)
    await agents.invoke(child, key + "-child")
    await agents.wait_for(child, lambda es: "model.started" in types(es))
    await agents.invoke(parent, key)
    parent_events = await agents.wait_terminal(parent)

    forked = await fork_thread(agents.bus, agents.tenant, parent, parent_events[-1].seq)
    assert set(forked.children) == {child}
    fork_child = forked.children[child]
    assert forked.canceled_runs.keys() == {fork_child}
    copy = await agents.events(fork_child)
    created = copy[0].payload
    assert isinstance(created, ThreadCreated) and created.parent is not None
    assert created.parent.thread_id == forked.thread_id
    assert "model.started" in types(copy) and "model.completed" not in types(copy)
    assert isinstance(copy[-1].payload, RunCanceled) and copy[-1].payload.reason == FORKED_MID_RUN
    assert {e.envelope.correlation_id for e in copy} == {forked.thread_id}
    # The original child runs on, untouched.
    assert settled(await agents.wait_terminal(child))[-1].type == "run.completed"


async def test_a_fork_of_a_manager_relinks_its_subagents(agents: Agents) -> None:
    key = "fork-task-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(task(f"quick {key}"), task(f"slow {key}"))),
        ScriptStep(content="manager done"),
    ])  # fmt: skip
    agents.llm.script(f"quick {key}", [ScriptStep(content="quick report", delay_ms=300)])
    agents.llm.script(f"slow {key}", [ScriptStep(content="slow report", delay_ms=4000)])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    events = await agents.wait_for(parent, lambda es: "subagent.completed" in types(es))
    at = next(e.seq for e in events if e.type == "subagent.completed")

    forked = await fork_thread(agents.bus, agents.tenant, parent, at)
    assert len(forked.children) == 2
    copy = await agents.events(forked.thread_id)
    spawned = {
        e.payload.tool_call_id: e.payload.child_thread_id
        for e in copy
        if isinstance(e.payload, SubagentSpawned)
    }
    assert set(spawned.values()) == set(forked.children.values())
    # Children keep the ids the coordinator derives, so it finds them and spawns nothing.
    for call_id, fork_child in spawned.items():
        assert fork_child == child_thread_id(agents.tenant, forked.thread_id, call_id)
    outcomes = {
        e.payload.child_thread_id: e.payload.outcome
        for e in copy
        if isinstance(e.payload, SubagentCompleted)
    }
    assert sorted(outcomes.values()) == ["canceled", "completed"]
    assert copy[-1].type == "run.canceled"

    await agents.wait_terminal(parent, timeout=30)  # by now every service saw the copies
    assert types(await agents.events(forked.thread_id)) == types(copy)
    for fork_child in forked.children.values():
        child_events = await agents.events(fork_child)
        assert types(child_events).count("run.started") <= 1
        assert settled(child_events)[-1].type in ("run.completed", "run.canceled")


@dataclass
class ForkApi:
    client: httpx.AsyncClient
    transport: httpx.ASGITransport
    secret: str


@pytest.fixture
async def fork_api(agents: Agents) -> AsyncIterator[ForkApi]:
    """The fork route alone, behind the real auth, for the test's tenant."""
    secret = secrets.token_urlsafe(16)
    deps = ApiDeps(
        pool=cast(asyncpg.Pool, None),  # the fork route reads the log only
        bus=agents.bus,
        system=make_system(),
        settings=ApiSettings(shared_secret=secret, shared_secret_tenant=agents.tenant),
    )
    app = Litestar(
        route_handlers=FORK_ROUTES,
        dependencies={
            "deps": Provide(lambda: deps, sync_to_thread=False),
            "principal": Provide(provide_principal, sync_to_thread=False),
        },
        middleware=[AuthMiddleware(deps)],
    )
    # litestar's ASGI signature is narrower than httpx's; the app is a plain ASGI callable.
    transport = httpx.ASGITransport(app=cast(Any, app))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api", headers={"X-SECRET": secret}, timeout=15
    ) as client:
        yield ForkApi(client, transport, secret)


async def test_the_fork_route_switches_the_blueprint(agents: Agents, fork_api: ForkApi) -> None:
    key = "fork-route-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="as a worker")])
    thread = await agents.thread()
    await agents.invoke(thread, key)
    original = await agents.wait_terminal(thread)
    path = f"/agency/{agents.agency}/agent/{thread}/fork"

    r = await fork_api.client.post(path, json={"atSeq": len(original), "agentType": "approver"})
    assert r.status_code == 201, r.text
    fork = r.json()["threadId"]
    assert r.json()["forkedFrom"] == thread
    copy = await agents.events(fork)
    switched = copy[-1].payload
    assert isinstance(switched, BlueprintSwitched)
    assert (switched.from_agent_type, switched.to_agent_type) == ("worker", "approver")
    agents.llm.script(
        key + "-next", [ScriptStep(content="x"), ScriptStep(content="as an approver")]
    )
    await agents.invoke(fork, key + "-next")
    events = await agents.wait_terminal(fork, count=2)
    started = [e.payload.agent_type for e in events if isinstance(e.payload, RunStarted)]
    assert started == ["worker", "approver"]

    bad = await fork_api.client.post(path, json={"atSeq": 999})
    assert bad.status_code == 404 and "outside" in bad.text
    unknown = await fork_api.client.post(path, json={"atSeq": 1, "agentType": "nobody"})
    assert unknown.status_code == 404 and "unknown agentType" in unknown.text
    missing = await fork_api.client.post(
        f"/agency/{agents.agency}/agent/01NOSUCH/fork", json={"atSeq": 1}
    )
    assert missing.status_code == 404

    # `agency fork` speaks to the same route when the system runs an API.
    result = await fork_over_http(
        "http://api", None, agents.agency, thread, 2, transport=fork_api.transport,
        headers={"X-SECRET": fork_api.secret},
    )  # fmt: skip
    assert result.canceled_runs  # seq 2 is the accepted request: its run never starts
    assert types(await agents.events(result.thread_id))[-1] == "run.canceled"
