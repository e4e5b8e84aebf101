"""Approve and cancel are bound to one run: checked up front over HTTP, 409 when not active."""

from __future__ import annotations

import httpx

from agency.contracts.commands import CancelRun
from agency.contracts.events import RunCanceled
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import EventContext
from tests.api.conftest import Thread, paused_for_approval
from tests.api.test_http import commands_stored, last_command


async def end_run(bus: Bus, thread: Thread, run_id: str) -> None:
    tenant, thread_id = thread.tenant.id, thread.thread_id
    position = await bus.store.last_position(tenant, "thread", thread_id)
    await bus.store.append(tenant, "thread", thread_id, [RunCanceled(run_id=run_id)],
                           expected=position, context=EventContext(agency_id=thread.agency_id))  # fmt: skip


async def test_cancel_or_approve_without_an_active_run_is_a_409_and_sends_nothing(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    auth = thread_a.tenant.auth
    cancel = await client.post(thread_a.path + "/cancel", headers=auth)
    assert cancel.status_code == 409
    assert cancel.json()["error"] == f"thread {thread_a.thread_id} has no active run"
    approve = await client.post(thread_a.path + "/approve", json={"approved": True}, headers=auth)
    assert approve.status_code == 409
    assert await commands_stored(bus, thread_a.tenant.id, "cancel") == 0
    assert await commands_stored(bus, thread_a.tenant.id, "approve") == 0


async def test_a_run_id_that_is_not_the_active_run_is_a_409_naming_it(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    auth = thread_a.tenant.auth
    await paused_for_approval(bus, thread_a, "run-1", "call-1")
    await end_run(bus, thread_a, "run-1")
    await paused_for_approval(bus, thread_a, "run-2", "call-2")

    old = await client.post(thread_a.path + "/cancel", json={"runId": "run-1"}, headers=auth)
    assert old.status_code == 409
    assert old.json()["error"] == "run run-1 is not active (it is canceled)"
    unknown = await client.post(
        thread_a.path + "/approve", json={"approved": True, "runId": "run-9"}, headers=auth
    )
    assert unknown.status_code == 409 and "has no run run-9" in unknown.json()["error"]
    current = await client.post(thread_a.path + "/cancel", json={"runId": "run-2"}, headers=auth)
    assert current.status_code == 202 and current.json()["runId"] == "run-2"


async def test_a_retried_cancel_with_its_idempotency_key_is_one_command(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    auth = {**thread_a.tenant.auth, "Idempotency-Key": "cancel-once"}
    await paused_for_approval(bus, thread_a, "run-1", "call-1")
    first = await client.post(thread_a.path + "/cancel", headers=auth)
    again = await client.post(thread_a.path + "/cancel", headers=auth)
    assert first.status_code == again.status_code == 202
    assert await commands_stored(bus, thread_a.tenant.id, "cancel") == 1
    stored = await last_command(bus, thread_a.tenant.id, "cancel")
    assert isinstance(stored.payload, CancelRun) and stored.payload.run_id == "run-1"
    assert stored.idempotency_key == f"{thread_a.thread_id}:cancel:cancel-once"


async def test_cancel_or_approve_on_a_thread_that_is_not_there_is_a_404_before_any_409(
    client: httpx.AsyncClient, bus: Bus, thread_a: Thread
) -> None:
    """The thread's ownership and its run are read together; the 404 still comes first."""
    auth = thread_a.tenant.auth
    missing = thread_a.path.rsplit("/", 1)[0] + "/01M8ZZZZZZZZZZZZZZZZZZZZZZ"
    for verb, body in (("cancel", {}), ("approve", {"approved": True})):
        answer = await client.post(f"{missing}/{verb}", json=body, headers=auth)
        assert answer.status_code == 404, answer.text
        assert "not found" in answer.json()["error"]
    bad = await client.post(thread_a.path.rsplit("/", 1)[0] + "/a.b/cancel", headers=auth)
    assert bad.status_code == 400, bad.text  # refused before any read names it
    assert await commands_stored(bus, thread_a.tenant.id, "cancel") == 0
    assert await commands_stored(bus, thread_a.tenant.id, "approve") == 0
