"""Tasks over both bindings with the SDK's client: streamed, canceled, listed, subscribed
to, and an approval asked for (TASK_STATE_INPUT_REQUIRED) and answered on the task."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, UnsupportedOperationError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.helpers import call
from tests.protocols.a2a.conftest import BINDINGS, Tenant
from tests.protocols.a2a.helpers import WAIT, ask, collect, send

pytestmark = pytest.mark.parametrize("binding", BINDINGS)


def _state(event: StreamResponse) -> int:
    if event.HasField("task"):
        return event.task.status.state
    return event.status_update.status.state


async def test_a_streamed_task_goes_from_working_to_completed(tenant: Tenant, binding: str) -> None:
    key = f"a2a-stream-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="streamed answer")])
    async with tenant.client("worker", binding) as client:
        events = await send(client, ask(key))
    first, *rest = events
    assert first.HasField("task")
    assert first.task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    artifacts = [e.artifact_update for e in rest if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.artifact.parts] == ["streamed answer"]
    assert artifacts[0].task_id == first.task.id
    assert rest[-1].HasField("status_update")
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    states = [_state(e) for e in events]
    assert TaskState.TASK_STATE_WORKING in states


async def test_a_working_task_is_canceled(tenant: Tenant, binding: str) -> None:
    key = f"a2a-cancel-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="never finished " * 20)])
    release = tenant.llm.hold(key)
    try:
        async with tenant.client("worker", binding) as client:
            events = client.send_message(ask(key))
            async with asyncio.timeout(WAIT):
                first = await anext(events)
                task_id = first.task.id
                canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
                assert canceled.status.state == TaskState.TASK_STATE_CANCELED
                rest = [e async for e in events]
            assert _state(rest[-1]) == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=task_id))
            with pytest.raises(UnsupportedOperationError):
                await collect(client.subscribe(SubscribeToTaskRequest(id=task_id)))
    finally:
        release.set()


async def test_tasks_are_listed_by_context_newest_first(tenant: Tenant, binding: str) -> None:
    key = f"a2a-list-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="one")])
    async with tenant.client("worker", binding, streaming=False) as client:
        (first,) = await send(client, ask(key))
        context = first.task.context_id
        (second,) = await send(client, ask(key, context=context))
        (elsewhere,) = await send(client, ask(key))
        listed = await client.list_tasks(ListTasksRequest(context_id=context))
        assert [t.id for t in listed.tasks] == [second.task.id, first.task.id]
        assert listed.total_size == 2
        everything = await client.list_tasks(ListTasksRequest(page_size=2))
        assert everything.total_size == 3 and everything.next_page_token
        assert everything.tasks[0].id == elsewhere.task.id
        rest = await client.list_tasks(
            ListTasksRequest(page_size=2, page_token=everything.next_page_token)
        )
        assert [t.id for t in rest.tasks] == [first.task.id] and not rest.next_page_token


async def test_an_approval_is_input_required_and_answered_on_the_task(
    tenant: Tenant, binding: str
) -> None:
    key = f"a2a-approve-{binding}-{tenant.agency}"
    tenant.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="looked up")]
    )
    async with tenant.client("approver", binding) as client:
        events = await send(client, ask(key))
        paused = events[-1].status_update
        assert paused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        (text, data) = paused.status.message.parts
        assert "lookup" in text.text and "approve" in text.text
        assert data.data.struct_value["toolCalls"][0]["name"] == "lookup"
        # A subscriber joining now sees the task waiting, and the stream ends there.
        (waiting,) = await collect(client.subscribe(SubscribeToTaskRequest(id=paused.task_id)))
        assert waiting.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        answer = ask("approve", context=paused.context_id, task=paused.task_id)
        resumed = await send(client, answer)
        assert _state(resumed[-1]) == TaskState.TASK_STATE_COMPLETED
        done = await client.get_task(GetTaskRequest(id=paused.task_id))
        assert [p.text for a in done.artifacts for p in a.parts] == ["looked up"]
        # A completed task takes no more messages.
        with pytest.raises(UnsupportedOperationError):
            await send(client, ask("approve", context=paused.context_id, task=paused.task_id))


async def test_a_subscriber_follows_a_working_task_to_its_end(tenant: Tenant, binding: str) -> None:
    key = f"a2a-subscribe-{binding}-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="followed")])
    release = tenant.llm.hold(key)
    try:
        async with tenant.client("worker", binding) as client:
            sent = client.send_message(ask(key))
            async with asyncio.timeout(WAIT):
                first = await anext(sent)
                followed = client.subscribe(SubscribeToTaskRequest(id=first.task.id))
                joined = await anext(followed)
                assert joined.task.id == first.task.id
                release.set()
                rest = [e async for e in followed]
                await sent.aclose()
        assert _state(rest[-1]) == TaskState.TASK_STATE_COMPLETED
    finally:
        release.set()
