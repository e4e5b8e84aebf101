"""Push notifications over both bindings with the SDK's client: a task's configs created,
read, listed and deleted, and its status changes (working, input-required, completed)
POSTed to a real receiver with the config's token and `Authorization`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from agency.contracts.events import RequestRejected
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext
from agency.services.a2a.tasks import task_id as task_id_of
from agency.services.api.idempotency import run_id_for
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.tenancy.fairness import ACTIVE_RUN_LIMIT
from tests.e2e.conftest import System
from tests.helpers import assert_eventually
from tests.langgraph.conftest import new_tenant
from tests.langgraph.helpers import call
from tests.protocols.a2a.conftest import BINDINGS, JSONRPC, Tenant
from tests.protocols.a2a.helpers import WAIT, ask, send
from tests.protocols.a2a.receiver import Pushed, Receiver, receiving

both = pytest.mark.parametrize("binding", BINDINGS)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with receiving() as found:
        yield found


def _states(pushed: list[Pushed], task_id: str) -> list[int]:
    return [
        p.event.status_update.status.state
        for p in pushed
        if p.event.HasField("status_update") and p.event.status_update.task_id == task_id
    ]


def _bearer(
    token: str, credentials: str, url: str, task_id: str = ""
) -> TaskPushNotificationConfig:
    auth = AuthenticationInfo(scheme="Bearer", credentials=credentials)
    return TaskPushNotificationConfig(task_id=task_id, url=url, token=token, authentication=auth)


@both
async def test_a_tasks_changes_are_pushed_with_its_token_and_authorization(
    tenant: Tenant, binding: str, receiver: Receiver
) -> None:
    key = f"a2a-push-{binding}-{tenant.agency}"
    tenant.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="looked up")]
    )
    release = tenant.llm.hold(key)
    try:
        async with tenant.client("approver", binding) as client:
            sent = client.send_message(ask(key))
            async with asyncio.timeout(WAIT):
                first = await anext(sent)
                task = first.task
                config = _bearer(f"tok-{binding}", f"cred-{binding}", receiver.url, task.id)
                created = await client.create_task_push_notification_config(config)
                assert created.task_id == task.id and created.id and created.url == receiver.url
                release.set()
                paused = [e async for e in sent][-1].status_update
            assert paused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            await send(client, ask("approve", context=task.context_id, task=task.id))
    finally:
        release.set()
    pushed = await receiver.until(
        lambda got: (
            TaskState.TASK_STATE_COMPLETED in _states(got, task.id)
            and any(p.event.HasField("artifact_update") for p in got)
        )
    )
    states = _states(pushed, task.id)
    assert {
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_INPUT_REQUIRED,
        TaskState.TASK_STATE_COMPLETED,
    } <= set(states), states
    (artifact,) = [p.event.artifact_update for p in pushed if p.event.HasField("artifact_update")]
    assert artifact.task_id == task.id and artifact.artifact.parts[0].text == "looked up"
    asking = next(
        p.event.status_update
        for p in pushed
        if _states([p], task.id) == [TaskState.TASK_STATE_INPUT_REQUIRED]
    )
    assert "lookup" in asking.status.message.parts[0].text
    for p in pushed:
        assert p.headers["authorization"] == f"Bearer cred-{binding}", p.headers
        assert p.headers["x-a2a-notification-token"] == f"tok-{binding}", p.headers
        assert p.headers["content-type"] == "application/a2a+json"
    assert not receiver.refused


@both
async def test_a_config_sent_with_the_message_pushes_the_task_from_its_start(
    tenant: Tenant, binding: str, receiver: Receiver
) -> None:
    key = f"a2a-push-send-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="done at once")])
    config = _bearer("from-send", "secret-send", receiver.url)
    async with tenant.client("worker", binding, push=config) as client:
        events = await send(client, ask(key))
    task_id = events[0].task.id
    pushed = await receiver.until(
        lambda got: TaskState.TASK_STATE_COMPLETED in _states(got, task_id)
    )
    states = _states(pushed, task_id)
    assert {TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING} <= set(states), states
    assert {p.headers["x-a2a-notification-token"] for p in pushed} == {"from-send"}
    await _listed_as_delivered(tenant, task_id, len(pushed))


async def test_a_config_sent_again_with_a_message_refused_for_a_limit_is_the_run_that_ran(
    tenant: Tenant, receiver: Receiver, bus: Bus
) -> None:
    """The runtime refused a message's run for the tenant's limits (the door's count
    lagged, the client was answered 429). The client sends the message again, its id and
    push config unchanged: the run is the message's next attempt, and the config is that
    task's, so its changes are pushed (not the refused run's, which has none)."""
    key = f"a2a-push-retried-{tenant.agency}"
    # The second run's model call sees the whole context, the first message's key too.
    tenant.llm.script(key, [ScriptStep(content="first answer"), ScriptStep(content="ran at last")])
    async with tenant.client("worker", JSONRPC) as client:
        context = (await send(client, ask(key)))[0].task.context_id
    retried = ask("again", context=context)
    message_id = retried.message.message_id
    refused = run_id_for(tenant.id, context, message_id)
    position = await bus.store.last_position(tenant.id, "thread", context)
    reason = f"{ACTIVE_RUN_LIMIT}: the tenant has 1 active runs, its limit is 1; retry in 1 s"
    await bus.store.append(
        tenant.id, "thread", context,
        [RequestRejected(run_id=refused, idempotency_key=f"{context}:{message_id}", reason=reason)],
        expected=position, context=EventContext(agency_id=tenant.agency, thread_id=context),
    )  # fmt: skip

    config = _bearer("retried", "secret-retried", receiver.url)
    async with tenant.client("worker", JSONRPC, push=config) as client:
        events = await send(client, retried)
    task_id = events[0].task.id
    assert task_id != task_id_of(context, refused)
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.artifact.parts] == ["ran at last"], events
    pushed = await receiver.until(
        lambda got: TaskState.TASK_STATE_COMPLETED in _states(got, task_id)
    )
    updated = {p.event.status_update.task_id for p in pushed if p.event.HasField("status_update")}
    assert updated == {task_id}


async def _listed_as_delivered(tenant: Tenant, task_id: str, received: int) -> None:
    """`GET …/pushDeliveries` lists the task's deliveries once the receiver has them."""
    path = f"{tenant.url}/agency/{tenant.agency}/pushDeliveries"

    async def listed() -> list[dict[str, object]]:
        r = await tenant.http.get(path, params={"taskId": task_id})
        assert r.status_code == 200, r.text
        found: list[dict[str, object]] = r.json()["deliveries"]
        assert len(found) >= received and {d["status"] for d in found} == {"delivered"}, found
        return found

    found = await assert_eventually(listed, timeout=WAIT)
    assert {d["taskId"] for d in found} == {task_id}
    assert all(d["attempts"] == 1 and d["lastStatus"] == 204 for d in found), found
    assert len({d["configId"] for d in found}) == 1
    r = await tenant.http.get(path, params={"taskId": "another-task"})
    assert r.json() == {"deliveries": []}
    r = await tenant.http.get(path, params={"taskId": "a/b"})
    assert r.status_code == 400 and "taskId" in r.text, r.text


@both
async def test_a_tasks_configs_are_read_listed_and_deleted(
    tenant: Tenant, binding: str, receiver: Receiver
) -> None:
    key = f"a2a-push-configs-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="configured")])
    async with tenant.client("worker", binding) as client:
        task_id = (await send(client, ask(key)))[0].task.id
        named = _bearer("t1", "c1", receiver.url, task_id)
        named.id = "mine"
        await client.create_task_push_notification_config(named)
        other = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, url=receiver.url + "/other")
        )
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
        )
        assert (got.url, got.token, got.authentication.credentials) == (receiver.url, "t1", "c1")
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert sorted(c.id for c in listed.configs) == sorted(["mine", other.id])
        # Created again under its id, a config is replaced.
        named.url = receiver.url + "/moved"
        await client.create_task_push_notification_config(named)

        async def moved() -> None:
            # The answer waits for the read models up to their lag bound; past it (a loaded
            # machine) the replacement is on the log and is read once they catch up.
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
            )
            assert got.url == receiver.url + "/moved"

        await assert_eventually(moved, timeout=WAIT)
        delete = DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
        await client.delete_task_push_notification_config(delete)
        await client.delete_task_push_notification_config(delete)  # idempotent
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert [c.id for c in listed.configs] == [other.id]
        with pytest.raises(TaskNotFoundError):
            await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
            )
        with pytest.raises(TaskNotFoundError):
            await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=f"{task_id}x")
            )


@both
@pytest.mark.parametrize(
    ("url", "scheme", "words"),
    [
        ("http://10.0.0.7/hook", "Bearer", "AGENCY_ALLOW_HOSTS"),
        ("ftp://h.example/hook", "Bearer", "http"),
        ("http://h.example/hook", "Bearer x", "scheme"),
        ("http://h.example/hook", "Bearer\n", "scheme"),
    ],
    ids=["private-address", "not-http", "bad-scheme", "scheme-ending-a-line"],
)
async def test_a_config_the_rules_refuse_is_invalid_params(
    tenant: Tenant, binding: str, url: str, scheme: str, words: str
) -> None:
    key = f"a2a-push-refused-{binding}-{scheme}-{url}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="refused")])
    async with tenant.client("worker", binding) as client:
        task_id = (await send(client, ask(key)))[0].task.id
        auth = AuthenticationInfo(scheme=scheme, credentials="c")
        config = TaskPushNotificationConfig(task_id=task_id, url=url, authentication=auth)
        with pytest.raises(InvalidParamsError, match=words):
            await client.create_task_push_notification_config(config)


async def test_a_config_is_found_by_proto_field_names_as_by_json_names(
    tenant: Tenant, receiver: Receiver
) -> None:
    """`task_id` as `taskId` in JSON-RPC params: proto's JSON readers accept both."""
    key = f"a2a-push-names-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="named")])
    async with tenant.client("worker", JSONRPC) as client:
        task_id = (await send(client, ask(key)))[0].task.id
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig"}
    params = {"task_id": task_id, "id": "snake", "url": receiver.url}
    r = await tenant.http.post(tenant.agent_url("worker"), json={**rpc, "params": params})
    assert r.json()["result"]["taskId"] == task_id, r.text
    rpc["method"] = "ListTaskPushNotificationConfigs"
    r = await tenant.http.post(
        tenant.agent_url("worker"), json={**rpc, "params": {"task_id": task_id}}
    )
    assert [c["id"] for c in r.json()["result"]["configs"]] == ["snake"], r.text


async def test_another_tenants_task_has_no_configs_to_read_or_make(
    tenant: Tenant, a2a_system: System, receiver: Receiver
) -> None:
    key = f"a2a-push-other-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="mine")])
    async with tenant.client("worker", JSONRPC) as client:
        task_id = (await send(client, ask(key)))[0].task.id
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task_id, id="mine", url=receiver.url)
        )
    other_key, other_id, other_agency = await new_tenant(a2a_system.url, "a2a-other")
    headers = {"Authorization": f"Bearer {other_key}"}
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        other = Tenant(tenant.url, tenant.llm, other_key, other_id, other_agency, http)
        async with other.client("worker", JSONRPC) as client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task_id, id="mine")
                )
            with pytest.raises(TaskNotFoundError):
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task_id, url=receiver.url)
                )
