"""A blueprint's agent card, and a message sent with the SDK's client over JSON-RPC
answered as a task: context = thread, task = run."""

from __future__ import annotations

import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import new_tenant
from tests.langgraph.helpers import call
from tests.protocols.a2a.conftest import BINDINGS, JSONRPC, Tenant
from tests.protocols.a2a.helpers import ask, collect, send


async def test_a_blueprint_card_names_its_interfaces_skills_and_key(tenant: Tenant) -> None:
    card = await tenant.card("worker")
    url = tenant.agent_url("worker")
    assert [(i.protocol_binding, i.url, i.protocol_version) for i in card.supported_interfaces] == [
        ("JSONRPC", url, "1.0"),
        ("HTTP+JSON", url, "1.0"),
    ]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    assert scheme.scheme == "Bearer"
    (requirement,) = card.security_requirements
    assert set(requirement.schemes) == {"bearer"}
    skills = {s.id: s for s in card.skills}
    assert skills["worker"].name == "worker" and "default" in skills["worker"].tags
    assert "tool:lookup" in skills


async def test_the_tenant_card_lists_every_blueprint_with_its_card(tenant: Tenant) -> None:
    r = await tenant.http.get(f"{tenant.url}/.well-known/agent-card.json")
    assert r.status_code == 200, r.text
    skills = {s["id"]: s for s in r.json()["skills"]}
    worker = skills[f"{tenant.agency}/worker"]
    assert f"{tenant.agent_url('worker')}/.well-known/agent-card.json" in worker["description"]


async def test_a_card_needs_the_key_and_another_tenants_is_not_found(
    tenant: Tenant, a2a_system: object
) -> None:
    async with httpx.AsyncClient(timeout=20) as anonymous:
        r = await anonymous.get(f"{tenant.agent_url('worker')}/.well-known/agent-card.json")
        assert r.status_code == 401
    r = await tenant.http.get(f"{tenant.agent_url('nobody')}/.well-known/agent-card.json")
    assert r.status_code == 404 and "nobody" in r.json()["error"]


async def test_a_message_is_answered_as_a_completed_task(tenant: Tenant) -> None:
    key = f"a2a-hello-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="hello from worker")])
    async with tenant.client("worker", JSONRPC, streaming=False) as client:
        (event,) = await send(client, ask(f"say hi {key}"))
        task = event.task
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in task.artifacts for p in a.parts] == ["hello from worker"]
        assert task.history[0].role == Role.ROLE_USER
        assert task.history[-1].parts[0].text == "hello from worker"
        got = await client.get_task(GetTaskRequest(id=task.id))
        assert got.id == task.id and got.context_id == task.context_id
        assert got.status.state == TaskState.TASK_STATE_COMPLETED
        # The context is the thread: Agency's own API reads the same run.
        thread, run = task.id.split(".")
        assert thread == task.context_id
        r = await tenant.http.get(f"{tenant.url}/agency/{tenant.agency}/agent/{thread}/runs")
        assert r.status_code == 200 and run in r.text
        # A second message on the context is a second task on the same thread.
        tenant.llm.script(f"{key}-2", [ScriptStep(content="again")])
        (again,) = await send(client, ask(f"once more {key}-2", context=task.context_id))
        assert again.task.context_id == task.context_id and again.task.id != task.id
        assert again.task.status.state == TaskState.TASK_STATE_COMPLETED


async def test_another_tenants_task_is_not_found(tenant: Tenant, a2a_system: object) -> None:
    key = f"a2a-mine-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="mine")])
    async with tenant.client("worker", JSONRPC, streaming=False) as client:
        (event,) = await send(client, ask(key))
    task_id = event.task.id
    other_key, other_id, other_agency = await new_tenant(tenant.url, "other")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {other_key}"}, timeout=30) as h:
        other = Tenant(tenant.url, tenant.llm, other_key, other_id, other_agency, h)
        for binding in BINDINGS:
            async with other.client("worker", binding) as client:
                with pytest.raises(TaskNotFoundError):
                    await client.get_task(GetTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await client.cancel_task(CancelTaskRequest(id=task_id))
                with pytest.raises(TaskNotFoundError):
                    await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
                with pytest.raises(TaskNotFoundError):
                    await send(client, ask("approve", context=event.task.context_id, task=task_id))
                listed = await client.list_tasks(ListTasksRequest(context_id=event.task.context_id))
                assert list(listed.tasks) == []
        r = await h.post(
            f"{tenant.url}/a2a/{other_agency}/worker",
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        )
        assert r.status_code == 200
        assert r.json()["error"]["code"] == -32001
        # Nor through the owner's agency: that agency is not the other tenant's.
        r = await h.post(
            tenant.agent_url("worker"),
            json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        )
        assert r.status_code == 404
    async with tenant.client("worker", JSONRPC) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=f"{task_id}x"))


async def test_return_immediately_answers_the_task_while_it_works(tenant: Tenant) -> None:
    key = f"a2a-immediately-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="later")])
    release = tenant.llm.hold(key)
    try:
        params = {
            "message": {"messageId": key, "role": "ROLE_USER", "parts": [{"text": key}]},
            "configuration": {"returnImmediately": True},
        }
        r = await tenant.http.post(
            tenant.agent_url("worker"),
            json={"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": params},
        )
        task = r.json()["result"]["task"]
        assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
        async with tenant.client("worker", JSONRPC) as client:
            followed = client.subscribe(SubscribeToTaskRequest(id=task["id"]))
            await anext(followed)
            release.set()
            events = await collect(followed)
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    finally:
        release.set()


async def test_the_catalogue_endpoint_names_the_agent_by_its_tenant_param(tenant: Tenant) -> None:
    key = f"a2a-catalogue-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="via the catalogue")])
    params = {
        "tenant": f"{tenant.agency}/worker",
        "message": {"messageId": key, "role": "ROLE_USER", "parts": [{"text": key}]},
    }
    body = {"jsonrpc": "2.0", "id": "c1", "method": "SendMessage", "params": params}
    r = await tenant.http.post(f"{tenant.url}/a2a", json=body)
    task = r.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["artifacts"][0]["parts"] == [{"text": "via the catalogue"}]
    # The same message again is the same task (its messageId is the run's idempotency key).
    again = await tenant.http.post(f"{tenant.url}/a2a", json=body)
    assert again.json()["result"]["task"]["id"] == task["id"]
    # The HTTP+JSON binding puts the tenant in the path: the agent's own URL.
    r = await tenant.http.get(f"{tenant.url}/a2a/{tenant.agency}/worker/tasks/{task['id']}")
    assert r.status_code == 200 and r.json()["id"] == task["id"]
    params["tenant"] = "no-slash"
    r = await tenant.http.post(f"{tenant.url}/a2a", json=body)
    assert r.json()["error"]["code"] == -32602


async def test_a_subagent_works_inside_its_parents_task(tenant: Tenant) -> None:
    key, child = f"a2a-manager-{tenant.agency}", f"a2a-child-{tenant.agency}"
    tenant.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("task", description=child, subagentType="worker")]),
            ScriptStep(content="delegated and done"),
        ],
    )
    tenant.llm.script(child, [ScriptStep(content="the child's part")])
    async with tenant.client("manager", JSONRPC) as client:
        events = await send(client, ask(key))
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    # The parent waits for its child as working: no input is asked of the client.
    assert TaskState.TASK_STATE_INPUT_REQUIRED not in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    (artifact,) = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert artifact.parts[0].text == "delegated and done"
    async with tenant.client("manager", JSONRPC) as client:
        listed = await client.list_tasks(ListTasksRequest())
    # The child's thread is the run's own, not a context of the agent.
    assert [t.id for t in listed.tasks] == [events[0].task.id]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_context_made_for_an_end_user_is_forgotten_with_them(
    tenant: Tenant, binding: str
) -> None:
    """`metadata.endUserId` on the message tags the thread a new context makes (docs/data.md,
    "End users"): forgetting that user deletes it; a malformed one is invalid params."""
    key = f"a2a-user-{binding}-{tenant.agency}"
    user = f"yann-{binding.lower().replace('+', '')}@example.com"
    tenant.llm.script(key, [ScriptStep(content="noted")])
    async with tenant.client("worker", binding, streaming=False) as client:
        request = ask(f"remember {key}")
        request.message.metadata.update({"endUserId": user})
        (event,) = await send(client, request)
        context = event.task.context_id
        bad = ask("hi")
        bad.message.metadata.update({"endUserId": "not an id"})
        with pytest.raises(InvalidParamsError, match=r"metadata\.endUserId"):
            await send(client, bad)
    r = await tenant.http.post(f"{tenant.url}/users/{user}/forget")
    assert r.status_code == 200, r.text
    assert r.json()["threads"] == [context]
    gone = await tenant.http.get(f"{tenant.url}/agency/{tenant.agency}/agent/{context}/state")
    assert gone.status_code == 410, gone.text
