"""Webhook subscriptions over HTTP, delivered from the log to a receiver that verifies each
delivery with the `standardwebhooks` library."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

import asyncpg
import pytest

from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.helpers import assert_eventually
from tests.protocols.webhooks.conftest import Agency, System
from tests.protocols.webhooks.receiver import Receiver, receiving


async def run_ended(agency: Agency, receiver: Receiver, events: list[str] | None = None) -> str:
    """Subscribe the receiver; its id (the receiver now knows the secret)."""
    created = await agency.subscribe(receiver.url, events or ["run.ended"])
    receiver.secret = created["secret"]
    return str(created["id"])


async def a_run(agency: Agency, text: str, answer: str = "done") -> tuple[str, str]:
    key = f"{text}-{agency.agency}"
    agency.llm.script(key, [ScriptStep(content=answer)])
    thread = await agency.thread()
    return thread, await agency.invoke(thread, key)


async def one_delivery(agency: Agency, webhook: str) -> dict[str, Any]:
    rows = await agency.deliveries(webhook)
    assert len(rows) == 1, rows
    return rows[0]


async def ended(bus: Bus, agency: Agency, thread: str) -> None:
    async def done() -> None:
        events = await bus.store.read(agency.tenant, "thread", thread)
        assert any(e.type == "run.completed" for e in events), [e.type for e in events]

    await assert_eventually(done, timeout=30)


async def test_a_run_ended_is_delivered_signed_with_its_secret_shown_once(
    agency: Agency, receiver: Receiver
) -> None:
    created = await agency.subscribe(receiver.url, ["run.ended"])
    assert created["secret"].startswith("whsec_") and created["events"] == ["run.ended"]
    receiver.secret = created["secret"]
    thread, run = await a_run(agency, "end", answer="all done")
    (delivery,) = (await receiver.until(1)).values()
    assert delivery.id.startswith("msg_")
    assert delivery.body["type"] == "run.ended"
    data = delivery.body["data"]
    assert data["runId"] == run and data["threadId"] == thread
    assert data["agencyId"] == agency.agency and data["status"] == "completed"
    assert data["result"] == "all done"
    assert receiver.refused == []
    listed = (await agency.http.get(agency.webhooks)).json()["webhooks"]
    assert [w["id"] for w in listed] == [created["id"]] and "secret" not in listed[0]

    async def recorded() -> dict[str, Any]:
        row = await one_delivery(agency, created["id"])
        assert row["status"] == "delivered", row
        return row

    row = await assert_eventually(recorded, timeout=10)
    assert row["id"] == delivery.id and row["attempts"] == 1 and row["event"] == "run.ended"
    assert row["lastStatus"] == 200 and row["nextAttemptAt"] is None


async def test_a_receiver_answering_500_then_200_gets_it_again_with_the_same_id(
    agency: Agency, receiver: Receiver
) -> None:
    receiver.statuses = [500, 500]
    webhook = await run_ended(agency, receiver)
    _, run = await a_run(agency, "retry")

    async def failing() -> None:
        row = await one_delivery(agency, webhook)
        assert row["status"] == "pending" and row["lastStatus"] == 500, row
        assert row["lastError"] == "the receiver answered 500" and row["nextAttemptAt"]

    await assert_eventually(failing, timeout=30)
    first, second, third = await receiver.until_requests(3)
    assert first.id == second.id == third.id and third.body["data"]["runId"] == run

    async def delivered() -> None:
        row = await one_delivery(agency, webhook)
        assert row["status"] == "delivered" and row["attempts"] == 3, row

    await assert_eventually(delivered, timeout=10)


async def test_approval_needed_carries_the_proposed_tool_calls(
    agency: Agency, receiver: Receiver
) -> None:
    await run_ended(agency, receiver, ["approval.needed"])
    key = f"approve-{agency.agency}"
    agency.llm.script(
        key, [ScriptStep(tool_calls=(ScriptToolCall(name="lookup", arguments={"word": "w"}),))]
    )
    thread = await agency.thread("approver")
    run = await agency.invoke(thread, key)
    (delivery,) = (await receiver.until(1)).values()
    assert delivery.body["type"] == "approval.needed"
    data = delivery.body["data"]
    assert data["runId"] == run and data["threadId"] == thread
    assert [c["name"] for c in data["toolCalls"]] == ["lookup"]


async def test_a_subagents_report_and_each_runs_end_are_delivered(
    agency: Agency, receiver: Receiver
) -> None:
    await run_ended(agency, receiver, ["subagent.reported", "run.ended"])
    key = f"parent-{agency.agency}"
    child = f"sub-{agency.agency}"  # shorter than the parent's key: each keeps its own script
    task = ScriptToolCall(
        name="task", arguments={"description": f"{child} look it up", "subagentType": "worker"}
    )
    agency.llm.script(key, [ScriptStep(tool_calls=(task,)), ScriptStep(content="all reported")])
    agency.llm.script(child, [ScriptStep(content="child done")])
    thread = await agency.thread("manager")
    run = await agency.invoke(thread, key)
    unique = await receiver.until(3, timeout=60)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for delivery in unique.values():
        by_type.setdefault(delivery.body["type"], []).append(delivery.body["data"])
    (reported,) = by_type["subagent.reported"]
    assert reported["threadId"] == thread and reported["outcome"] == "completed"
    assert reported["report"] == "child done"
    ended = {d["threadId"]: d for d in by_type["run.ended"]}
    assert ended[thread]["runId"] == run and ended[thread]["result"] == "all reported"
    assert ended[reported["childThreadId"]]["status"] == "completed"


async def test_a_workflows_proposal_is_delivered(agency: Agency, receiver: Receiver) -> None:
    await run_ended(agency, receiver, ["workflow.proposal"])
    lead = f"lead-{agency.agency}"
    proposal = ScriptToolCall(
        name="proposal_open",
        arguments={"title": "Ship it?", "options": ["yes", "no"], "voters": ["lead"]},
    )
    agency.llm.script(lead, [ScriptStep(tool_calls=(proposal,)), ScriptStep(content="asked")])
    definition = {"name": "vote", "agents": {"lead": {"system_prompt": f"Your script is {lead}."}}}
    base = f"/agency/{agency.agency}/workflows"
    r = await agency.http.post(base, json={"definition": definition}, timeout=60)
    assert r.status_code in (201, 202), r.text
    workflow = r.json()["id"]
    r = await agency.http.post(f"{base}/{workflow}/messages", json={"content": "@lead decide"})
    assert r.status_code == 202, r.text
    (delivery,) = (await receiver.until(1)).values()
    data = delivery.body["data"]
    assert delivery.body["type"] == "workflow.proposal" and data["workflowId"] == workflow
    assert data["title"] == "Ship it?" and data["options"] == ["yes", "no"]
    assert data["author"] == "lead" and data["voters"] == ["lead"]


async def test_a_killed_service_loses_no_event_and_the_receiver_dedupes_by_id(
    agency: Agency, receiver: Receiver, bus: Bus
) -> None:
    await run_ended(agency, receiver)
    receiver.hold = asyncio.Event()  # the first delivery is held unanswered
    _, first = await a_run(agency, "kill-a")
    (held,) = await receiver.until_requests(1)
    await agency.hooks.kill()  # mid-attempt: its answer is never recorded
    receiver.hold.set()
    later = [await a_run(agency, f"kill-{n}") for n in "bc"]
    for thread, _ in later:
        await ended(bus, agency, thread)  # written while no webhooks service runs
    agency.hooks.start()
    unique = await receiver.until(3, timeout=60)
    runs = {r.body["data"]["runId"] for r in unique.values()}
    assert runs == {first, *(run for _, run in later)}
    # The attempt cut short was made again, under the same id.
    await receiver.until_requests(4, timeout=30)
    assert [r.id for r in receiver.requests].count(held.id) >= 2
    assert len(receiver.unique()) == 3


async def test_a_stopped_service_goes_on_with_its_schedule(
    agency: Agency, receiver: Receiver
) -> None:
    await run_ended(agency, receiver)
    receiver.statuses = [503]
    _, run = await a_run(agency, "stop")
    await receiver.until_requests(1)
    await agency.hooks.stop()
    agency.hooks.start()
    second = (await receiver.until_requests(2))[1]
    assert second.body["data"]["runId"] == run


async def test_delivery_checks_the_address_a_name_resolves_to(
    agency: Agency, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name that passes when subscribed but resolves to a loopback or private address is
    refused on delivery, until the operator allows that address."""
    host = socket.gethostname()
    addresses = {str(a[4][0]) for a in socket.getaddrinfo(host, 80, socket.AF_INET)}
    # The machine's own name: it resolves to addresses no tenant's connection may reach.
    assert all(ipaddress.ip_address(a).is_private for a in addresses), addresses
    await agency.hooks.stop()
    monkeypatch.delenv("AGENCY_ALLOW_HOSTS")
    agency.hooks.start()
    async with receiving("0.0.0.0", host) as receiver:
        created = await agency.subscribe(receiver.url, ["run.ended"])
        receiver.secret = created["secret"]
        _, run = await a_run(agency, "rebind")

        async def refused() -> None:
            row = await one_delivery(agency, created["id"])
            assert row["status"] == "pending", row
            assert "AGENCY_ALLOW_HOSTS" in (row["lastError"] or ""), row

        await assert_eventually(refused, timeout=30)
        assert receiver.requests == []
        await agency.hooks.stop()
        monkeypatch.setenv("AGENCY_ALLOW_HOSTS", ",".join(sorted(addresses)))
        agency.hooks.start()
        (delivery,) = (await receiver.until(1)).values()
        assert delivery.body["data"]["runId"] == run


async def test_a_url_no_client_can_send_to_fails_its_delivery_and_the_others_go_on(
    agency: Agency, receiver: Receiver, webhook_system: System
) -> None:
    """A subscription whose saved URL holds a control character (saved before the form
    check refused them) ends its delivery `failed`, saying why; the dispatcher goes on
    delivering the others."""
    good = await run_ended(agency, receiver)
    bad = (await agency.subscribe(receiver.url, ["run.ended"]))["id"]
    conn = await asyncpg.connect(webhook_system.database_url)
    try:
        await conn.execute(
            "UPDATE webhook_subscriptions SET url = $1 WHERE subscription_id = $2",
            "https://example.com/a\x05b", bad,
        )  # fmt: skip
    finally:
        await conn.close()
    _, run = await a_run(agency, "control")

    async def failed() -> dict[str, Any]:
        row = await one_delivery(agency, bad)
        assert row["status"] == "failed", row
        return row

    row = await assert_eventually(failed, timeout=30)
    assert "URL is refused" in row["lastError"] and row["attempts"] == 1, row
    (delivery,) = (await receiver.until(1)).values()
    assert delivery.body["data"]["runId"] == run
    assert (await one_delivery(agency, good))["status"] == "delivered"
