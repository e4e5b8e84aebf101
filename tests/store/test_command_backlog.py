"""A command worker with tenant bounds over a real consumer: one tenant's flood of commands
holds at most its bound, the excess dead-lettered with the reason (`tenant_backlog`), while
another tenant's command is handled meanwhile."""

from __future__ import annotations

import asyncio

from agency.contracts.codec import encode
from agency.contracts.commands import CancelRun, CommandEnvelope
from agency.contracts.envelope import utc_now
from agency.contracts.ids import new_id
from agency.contracts.subjects import COMMANDS_STREAM, command_subject
from agency.infra.jetstream.commandbus import CommandWorker, Delivery
from agency.infra.jetstream.connection import Bus
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually

FLOOD = 12
TENANT_HELD = 4


async def _send(bus: Bus, tenant: str, service: str, key: str) -> None:
    envelope = CommandEnvelope(
        command_id=new_id(), tenant_id=tenant, idempotency_key=key, ts=utc_now(),
        type="runtime.cancel", version=1,
        payload=CancelRun(agency_id="a", thread_id=key, reason=key),
    )  # fmt: skip
    await bus.js.publish(
        command_subject(tenant, service, "cancel"),
        encode(envelope),
        headers={"Nats-Msg-Id": f"{tenant}:{key}"},
    )


async def test_a_tenants_commands_beyond_its_backlog_bound_are_dead_lettered_others_go_on(
    bus: Bus, tenant: str
) -> None:
    flooding, calm = tenant, tenant + "c"
    service = "svc" + tenant[-8:]
    gate = asyncio.Event()
    handled: list[tuple[str, str]] = []

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        if envelope.tenant_id == flooding:
            await gate.wait()
        handled.append((envelope.tenant_id, envelope.idempotency_key))

    for n in range(FLOOD):
        await _send(bus, flooding, service, f"k{n}")
    stop = asyncio.Event()
    worker = CommandWorker(
        bus.js, service, handler, layout=bus.layout, dead_letters=bus.dead_letters,
        batch=8, held=32, tenant_running=2, tenant_held=TENANT_HELD,
    )  # fmt: skip
    task = asyncio.create_task(worker.run(stop))
    try:
        await _send(bus, calm, service, "calm")

        async def calm_handled() -> None:
            assert (calm, "calm") in handled

        # The flood's handlers are still held at the gate.
        await assert_eventually(calm_handled, timeout=20)

        async def excess_dead_lettered() -> list[tuple[str, str, bytes]]:
            letters = await dead_letters_for(bus, flooding)
            assert len(letters) == FLOOD - TENANT_HELD
            return letters

        letters = await assert_eventually(excess_dead_lettered, timeout=20)
        assert {reason for reason, _, _ in letters} == {"tenant_backlog"}
        assert all(f"the bound is {TENANT_HELD}" in detail for _, detail, _ in letters)
        gate.set()

        async def held_ones_handled() -> None:
            assert sum(t == flooding for t, _ in handled) == TENANT_HELD

        await assert_eventually(held_ones_handled, timeout=20)
    finally:
        gate.set()
        stop.set()
        await asyncio.wait_for(task, timeout=10)
        await bus.js.delete_consumer(COMMANDS_STREAM, f"{service}-commands")
