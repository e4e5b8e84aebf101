"""Commands: stored once per idempotency key, handled once, poison dead-lettered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from agency.contracts.codec import encode
from agency.contracts.commands import CancelRun, CommandEnvelope, CreateAgency
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected
from agency.contracts.ids import new_id
from agency.contracts.subjects import command_subject
from agency.infra.jetstream.commandbus import CommandWorker, Defer, Delivery
from agency.infra.jetstream.connection import Bus
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually

Handler = Callable[[CommandEnvelope, Delivery], Awaitable[None]]


@pytest.fixture
async def run_worker(bus: Bus) -> AsyncIterator[Callable[[str, Handler], Awaitable[None]]]:
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def start(service: str, handler: Handler) -> None:
        worker = CommandWorker(
            bus.js,
            service,
            handler,
            layout=bus.layout,
            dead_letters=bus.dead_letters,
            max_deliver=3,
            backoff=(0.05,),
        )
        tasks.append(asyncio.create_task(worker.run(stop)))

    yield start
    stop.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


async def test_command_sent_twice_with_one_key_is_handled_once(
    bus: Bus, tenant: str, run_worker: Callable[[str, Handler], Awaitable[None]]
) -> None:
    "svc" + tenant[-8:]
    handled: list[str] = []

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        if envelope.tenant_id == tenant:
            handled.append(envelope.idempotency_key)

    command = CreateAgency(agency_id="a1", name="one")
    first = await bus.commands.send(tenant, command, idempotency_key="key-1")
    second = await bus.commands.send(tenant, command, idempotency_key="key-1")
    other = await bus.commands.send(tenant, command, idempotency_key="key-2")
    assert not first.duplicate and second.duplicate and not other.duplicate
    assert second.stream_seq == first.stream_seq

    # CreateAgency routes to the registry service; use a service of the test's own instead.
    await run_worker("registry", handler)

    async def both_handled() -> None:
        assert sorted(handled) == ["key-1", "key-2"]

    await assert_eventually(both_handled)


async def test_poison_command_goes_to_dead_letters_and_worker_keeps_going(
    bus: Bus, tenant: str, run_worker: Callable[[str, Handler], Awaitable[None]]
) -> None:
    handled: list[str] = []

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        if envelope.tenant_id == tenant:
            handled.append(envelope.payload.reason)  # type: ignore[union-attr]

    await run_worker("runtime", handler)
    await bus.nc.publish(command_subject(tenant, "runtime", "cancel"), b"{not json")
    await bus.js.publish(command_subject(tenant, "runtime", "cancel"), b'{"type": "nope"}')
    await bus.commands.send(tenant, CancelRun(agency_id="a", thread_id="t", reason="after"))

    async def settled() -> None:
        assert handled == ["after"]
        letters = await dead_letters_for(bus, tenant)
        assert [reason for reason, _, _ in letters] == ["undecodable", "undecodable"]
        assert all("cannot decode command" in detail for _, detail, _ in letters)
        assert [data for _, _, data in letters] == [b"{not json", b'{"type": "nope"}']

    await assert_eventually(settled)


async def test_failing_handler_is_retried_then_dead_lettered_with_the_error(
    bus: Bus, tenant: str, run_worker: Callable[[str, Handler], Awaitable[None]]
) -> None:
    attempts: list[int] = []
    rejected: list[str] = []

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        if envelope.tenant_id != tenant:
            return
        payload = envelope.payload
        assert isinstance(payload, CancelRun)
        if payload.reason == "reject":
            rejected.append(payload.thread_id)
            raise CommandRejected("unknown_thread", f"thread {payload.thread_id} does not exist")
        attempts.append(delivery.attempt)
        raise RuntimeError("boom")

    await run_worker("runtime", handler)
    await bus.commands.send(tenant, CancelRun(agency_id="a", thread_id="t1", reason="fail"))
    await bus.commands.send(tenant, CancelRun(agency_id="a", thread_id="t2", reason="reject"))

    async def settled() -> None:
        letters = await dead_letters_for(bus, tenant)
        assert sorted(reason for reason, _, _ in letters) == ["exhausted", "unknown_thread"]
        details = {reason: detail for reason, detail, _ in letters}
        assert details["exhausted"] == "RuntimeError: boom"
        assert details["unknown_thread"] == "thread t2 does not exist"

    await assert_eventually(settled, timeout=15)
    assert attempts == [1, 2, 3]
    assert rejected == ["t2"]


async def test_commands_deferred_by_the_thousand_do_not_hold_up_the_others(
    bus: Bus, tenant: str
) -> None:
    """A deferred command stays pending on the broker until it is due (the runtime defers
    one watch per active or parked run). More of them than the broker's default limit of
    pending messages (1,000) must not stop the next command from being delivered."""
    service = "defer" + tenant[-8:]
    deferred = 1_100
    seen: set[str] = set()
    urgent = asyncio.Event()

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        reason = envelope.payload.reason  # type: ignore[union-attr]
        if reason == "urgent":
            urgent.set()
            return
        seen.add(envelope.idempotency_key)
        raise Defer(600)

    async def send(key: str, reason: str) -> None:
        envelope = CommandEnvelope(
            command_id=new_id(), tenant_id=tenant, idempotency_key=key, ts=utc_now(),
            type="runtime.cancel", version=1,
            payload=CancelRun(agency_id="a", thread_id=key, reason=reason),
        )  # fmt: skip
        await bus.js.publish(
            command_subject(tenant, service, "cancel"),
            encode(envelope),
            headers={"Nats-Msg-Id": f"{tenant}:{key}"},
        )

    stop = asyncio.Event()
    worker = CommandWorker(
        bus.js, service, handler, layout=bus.layout, dead_letters=bus.dead_letters, batch=256
    )
    task = asyncio.create_task(worker.run(stop))
    try:
        for start in range(0, deferred, 100):
            await asyncio.gather(*(send(f"k{i}", "later") for i in range(start, start + 100)))

        async def all_deferred() -> None:
            assert len(seen) == deferred

        await assert_eventually(all_deferred, timeout=60)
        await send("urgent", "urgent")
        await asyncio.wait_for(urgent.wait(), timeout=20)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)
