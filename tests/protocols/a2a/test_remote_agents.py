"""A blueprint's remote A2A agent as a tool: the card read at the run's start, the call sent
with the A2A SDK's client to Agency's own A2A server (another blueprint of the same system
plays the remote agent), the remote conversation continued by the thread's next call, and
failures (refused by the egress rule, unreachable) answered as tool errors the model reads."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.protocols.a2a.conftest import Tenant
from tests.security.conftest import save, until_runs_end


@pytest.fixture
async def api(tenant: Tenant) -> AsyncIterator[Client]:
    """The tenant on Agency's own HTTP API."""
    headers = {"Authorization": f"Bearer {tenant.key}"}
    async with httpx.AsyncClient(base_url=tenant.url, headers=headers, timeout=60) as http:
        yield Client(http=http, llm=tenant.llm, agency=tenant.agency, tenant=tenant.id)


def caller(name: str, card_url: str, key: str, **agent: Any) -> dict[str, Any]:
    remote = {"name": "helper", "url": card_url, "headers": {"Authorization": f"Bearer {key}"}}
    return {
        "name": name,
        "prompt": f"{name} prompt",
        "config": {"remoteAgents": [{**remote, **agent}]},
    }


def script_caller(api: Client, name: str, message: str) -> None:
    """The caller's model: ask `helper` with `message`, then end the turn (each turn)."""
    call = {"name": "helper", "arguments": {"message": message}}
    api.llm.script(
        f"{name} prompt",
        [ScriptStep(tool_calls=[call]), ScriptStep(content="the helper answered")],
        count="turn",
    )


def results(found: list[dict[str, Any]], thread: str) -> list[dict[str, Any]]:
    own = [e for e in found if e.get("threadId", thread) == thread]
    return [e for e in own if e["type"] in ("tool.output", "tool.error")]


async def save_caller(api: Client, name: str, card_url: str, key: str, **agent: Any) -> None:
    """Save the blueprint `name` calling the remote agent at `card_url` as `helper`."""
    r = await save(api, caller(name, card_url, key, **agent))
    assert r.status_code == 201, r.text


async def helper_error(api: Client, name: str) -> str:
    """Run a new thread of `name` once: its one tool result is an error the model reads,
    naming `helper`, and the run still completes. The error."""
    thread = await api.thread(name)
    await api.invoke(thread, "ask the helper")
    found = await until_runs_end(api, thread)
    (error,) = results(found, thread)
    assert error["type"] == "tool.error", error
    assert [e["type"] for e in found if e["type"].startswith("run.")][-1] == "run.completed"
    text: str = error["data"]["error"]
    assert "'helper'" in text, text
    return text


async def test_a_remote_agent_is_a_tool_and_its_conversation_goes_on(
    tenant: Tenant, api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    name = "caller" + new_id().lower()[-8:]
    card_url = f"{tenant.agent_url('worker')}/.well-known/agent-card.json"
    await save_caller(api, name, card_url, tenant.key)
    question = f"question for the worker {name}"
    script_caller(api, name, question)
    # The remote worker answers its conversation's first and second message differently.
    api.llm.script(
        question, [ScriptStep(content="first answer"), ScriptStep(content="second answer")]
    )
    thread = await api.thread(name)

    await api.invoke(thread, "ask the helper")
    found = await until_runs_end(api, thread)
    (first,) = results(found, thread)
    assert first["type"] == "tool.output", first
    assert first["data"]["output"] == "first answer"
    context = first["data"]["remoteContextId"]
    assert context
    # The model was offered the agent as a tool described by its card's skills.
    (offered,) = {
        json.dumps(tool)
        for body in api.llm.requests
        if any(f"{name} prompt" in str(m.get("content")) for m in body["messages"])
        for tool in body.get("tools", ())
        if tool["function"]["name"] == "helper"
    }
    helper = json.loads(offered)["function"]
    assert "Its skills:" in helper["description"] and "lookup" in helper["description"]
    assert helper["parameters"]["required"] == ["message"]

    await api.invoke(thread, "ask the helper again")
    found = await until_runs_end(api, thread, runs=2)
    _, second = results(found, thread)
    assert second["type"] == "tool.output", second
    assert second["data"]["output"] == "second answer"
    assert second["data"]["remoteContextId"] == context
    # The remote conversation is a thread of the worker's, with one run per call.
    r = await api.http.get(f"/agency/{tenant.agency}/agent/{context}/runs")
    assert r.status_code == 200, r.text
    assert len(r.json()) == 2, r.json()


async def test_a_remote_agent_at_a_loopback_address_is_refused_on_save(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENCY_ALLOW_HOSTS", raising=False)  # the package allows loopback
    body = caller("peek" + new_id().lower()[-8:], "http://127.0.0.1:9/card.json", "k")
    r = await save(api, body)
    assert r.status_code == 403, r.text  # well formed, refused by the deployment
    detail = r.json()["error"]
    assert "config.remoteAgents[0].url" in detail and "AGENCY_ALLOW_HOSTS" in detail


async def test_a_remote_agent_the_egress_rule_refuses_is_a_tool_error(
    tenant: Tenant, api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Allowed when saved, no longer when the run calls it: the model reads why."""
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    name = "refused" + new_id().lower()[-8:]
    card_url = f"{tenant.agent_url('worker')}/.well-known/agent-card.json?for={name}"
    await save_caller(api, name, card_url, tenant.key)
    monkeypatch.delenv("AGENCY_ALLOW_HOSTS")
    script_caller(api, name, "anything")
    error = await helper_error(api, name)
    assert "refused" in error and "loopback" in error and "AGENCY_ALLOW_HOSTS" in error, error


async def test_an_unreachable_remote_agent_is_a_tool_error_and_the_run_goes_on(
    api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    name = "gone" + new_id().lower()[-8:]
    await save_caller(api, name, f"http://127.0.0.1:{port}/card.json", "k")
    script_caller(api, name, "anything")
    error = await helper_error(api, name)
    assert "unreachable" in error, error


async def test_a_remote_task_that_fails_is_a_tool_error_naming_its_state(
    tenant: Tenant, api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    name = "failing" + new_id().lower()[-8:]
    card_url = f"{tenant.agent_url('worker')}/.well-known/agent-card.json"
    await save_caller(api, name, card_url, tenant.key)
    question = f"a question the worker cannot answer {name}"
    script_caller(api, name, question)
    api.llm.script(question, [ScriptStep(status=400, times=10)])
    error = await helper_error(api, name)
    assert "failed" in error, error


async def test_a_remote_agent_slower_than_its_timeout_is_a_tool_error(
    tenant: Tenant, api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    name = "slow" + new_id().lower()[-8:]
    card_url = f"{tenant.agent_url('worker')}/.well-known/agent-card.json"
    await save_caller(api, name, card_url, tenant.key, timeout=1)
    question = f"a slow question {name}"
    script_caller(api, name, question)
    api.llm.script(question, [ScriptStep(content="too late", delay_ms=4000)])
    error = await helper_error(api, name)
    assert "within 1 s" in error, error


async def test_a_remote_task_asking_for_input_is_answered_by_the_next_call(
    tenant: Tenant, api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker holds a call for approval (its `hitl`): the caller's model reads that it
    waits, and its next call (`approve`) answers that task, which then completes."""
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    name = "approver" + new_id().lower()[-8:]
    card_url = f"{tenant.agent_url('worker')}/.well-known/agent-card.json"
    await save_caller(api, name, card_url, tenant.key)
    question = f"look up a guarded word {name}"
    ask = {"name": "helper", "arguments": {"message": question}}
    approve = {"name": "helper", "arguments": {"message": "approve"}}
    api.llm.script(
        f"{name} prompt",
        [
            ScriptStep(tool_calls=[ask]),
            ScriptStep(content="it waits for approval"),
            ScriptStep(tool_calls=[approve]),
            ScriptStep(content="approved"),
        ],
    )
    guarded = {"name": "lookup_guarded", "arguments": {"word": "fig"}}
    api.llm.script(
        question, [ScriptStep(tool_calls=[guarded]), ScriptStep(content="fig is a fruit")]
    )
    thread = await api.thread(name)

    await api.invoke(thread, "ask the helper")
    found = await until_runs_end(api, thread)
    (first,) = results(found, thread)
    assert first["type"] == "tool.output", first
    assert first["data"]["output"].startswith("The remote agent needs more input to go on:")
    assert "lookup_guarded" in first["data"]["output"]
    context, task = first["data"]["remoteContextId"], first["data"]["remoteTaskId"]
    assert context and task.startswith(f"{context}.")

    await api.invoke(thread, "approve it")
    found = await until_runs_end(api, thread, runs=2)
    _, second = results(found, thread)
    assert second["type"] == "tool.output", second
    assert second["data"]["output"] == "fig is a fruit"
    assert second["data"]["remoteContextId"] == context
    assert second["data"].get("remoteTaskId", "") == ""
    # One remote task, held and then approved: the worker's thread ran once.
    r = await api.http.get(f"/agency/{tenant.agency}/agent/{context}/runs")
    assert r.status_code == 200 and len(r.json()) == 1, r.text


async def test_a_remote_agent_refusing_the_key_is_a_tool_error_naming_the_status(
    tenant: Tenant, api: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    name = "badkey" + new_id().lower()[-8:]
    card_url = f"{tenant.agent_url('worker')}/.well-known/agent-card.json"
    await save_caller(api, name, card_url, "not-a-key")
    script_caller(api, name, "anything")
    error = await helper_error(api, name)
    assert "HTTP 401" in error, error
