"""Commands in partitions: on a log of N partitions each command lies in the stream of its
aggregate's partition (its thread's, as its events; else its agency's), whether the system
sent it or a tenant did through the gateway; a service's worker takes them from every
partition, the gateway's backlog counts them in all, a dead-lettered one is re-driven into
its own partition, and a single commands stream left from an earlier store is removed
while empty and refused while it holds commands."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from agency.contracts.codec import encode, encode_command
from agency.contracts.commands import CancelRun, CommandEnvelope, CreateAgency
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected
from agency.contracts.ids import new_id
from agency.contracts.partitions import EventLayout, partition_of
from agency.contracts.sealed import installed_cipher
from agency.contracts.subjects import COMMANDS_STREAM
from agency.infra.jetstream.commandbus import CommandHandler, CommandWorker, Delivery
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.dlq_admin import list_letters, replay
from agency.infra.jetstream.streams import StreamSettings, command_stream, provision
from agency.infra.jetstream.upgrade import UpgradeError
from agency.infra.launch import NatsServer
from agency.services.gateway.backlog import CommandBacklog
from agency.services.gateway.service import Gateway
from agency.services.tenancy.admission import AdmissionSettings
from tests.helpers import assert_eventually

N = 3


@pytest.fixture
async def partitioned(fresh_server: NatsServer) -> AsyncIterator[Bus]:
    async with Bus(fresh_server.url) as admin:
        await provision(admin.js, StreamSettings(partitions=N))
    async with Bus(fresh_server.url) as bus:
        assert bus.layout == EventLayout(N)
        yield bus


@asynccontextmanager
async def _running(work: Callable[[asyncio.Event], Awaitable[None]]) -> AsyncIterator[None]:
    """`work` (a worker's or the gateway's `run`) until the block is left."""
    stop = asyncio.Event()
    task = asyncio.create_task(work(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)


def _runtime_worker(bus: Bus, handler: CommandHandler) -> CommandWorker:
    return CommandWorker(
        bus.js, "runtime", handler, layout=bus.layout, dead_letters=bus.dead_letters
    )


async def _held(bus: Bus) -> dict[int, int]:
    return {
        p: (await bus.js.stream_info(f"{COMMANDS_STREAM}_{p}")).state.messages for p in range(N)
    }


def _cancel(tenant: str, thread_id: str) -> CommandEnvelope:
    return CommandEnvelope(
        command_id=new_id(), tenant_id=tenant, idempotency_key=new_id(), ts=utc_now(),
        type="runtime.cancel", version=1,
        payload=CancelRun(agency_id="a1", thread_id=thread_id, reason="probe"),
    )  # fmt: skip


async def test_three_partitions_provision_three_commands_streams_and_no_single_one(
    partitioned: Bus,
) -> None:
    for p in range(N):
        info = await partitioned.js.stream_info(f"{COMMANDS_STREAM}_{p}")
        assert info.config.subjects == [f"tenant.*.cmd.{p}.>"]
        assert info.config.retention == command_stream(StreamSettings()).retention
    with pytest.raises(Exception, match="not found"):
        await partitioned.js.stream_info(COMMANDS_STREAM)


async def test_each_command_lies_in_its_aggregates_partition_and_one_worker_takes_all(
    partitioned: Bus, tenant: str
) -> None:
    bus = partitioned
    threads = [new_id() for _ in range(12)]
    for thread_id in threads:
        await bus.commands.send(tenant, CancelRun(agency_id="a1", thread_id=thread_id))
    agency = new_id()
    await bus.commands.send(tenant, CreateAgency(agency_id=agency, name="probe"))
    expected = {p: sum(1 for t in threads if partition_of(t, N) == p) for p in range(N)}
    expected[partition_of(agency, N)] += 1
    assert await _held(bus) == expected
    assert len([p for p, held in expected.items() if held]) > 1
    stored = await bus.js.get_msg(
        f"{COMMANDS_STREAM}_{partition_of(agency, N)}",
        subject=f"tenant.{tenant}.cmd.{partition_of(agency, N)}.registry.create_agency",
    )
    assert stored.data

    # The gateway's reading of what waits counts the tenant's commands in every partition.
    backlog = CommandBacklog(AdmissionSettings(), layout=bus.layout)
    await backlog.read(bus.nc)
    assert backlog.waiting[tenant] == len(threads) + 1

    handled: list[str] = []

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        assert isinstance(envelope.payload, CancelRun)
        assert delivery.subject == bus.layout.command_subject(
            tenant, "runtime", "cancel", envelope.payload.thread_id
        )
        handled.append(envelope.payload.thread_id)

    async def all_handled() -> None:
        assert sorted(handled) == sorted(threads)
        held = await _held(bus)
        assert held == {p: int(p == partition_of(agency, N)) for p in range(N)}

    async with _running(_runtime_worker(bus, handler).run):
        await assert_eventually(all_handled, timeout=20)


async def test_a_tenants_command_through_the_gateway_lies_in_its_threads_partition(
    partitioned: Bus, tenant: str
) -> None:
    bus = partitioned
    cipher = installed_cipher()
    assert cipher is not None
    async with _running(Gateway(bus).run):
        await bus.nc.flush(timeout=5)
        for sealed in (False, True):
            thread_id = new_id()
            envelope = _cancel(tenant, thread_id)
            if sealed:
                await cipher.prepare(tenant, thread_id)
            data = encode_command(envelope) if sealed else encode(envelope)
            assert (b'"sealed":' in data) == sealed
            reply = await bus.nc.request(f"gw.{tenant}.cmd.runtime.cancel", data, timeout=10)
            ack = json.loads(reply.data)
            assert "error" not in ack, ack
            assert ack["stream"] == f"{COMMANDS_STREAM}_{partition_of(thread_id, N)}"
        # A body that is no command is stored in its tenant's partition, for the service
        # to dead-letter with its reason.
        reply = await bus.nc.request(f"gw.{tenant}.cmd.runtime.cancel", b"[1", timeout=10)
        assert json.loads(reply.data)["stream"] == f"{COMMANDS_STREAM}_{partition_of(tenant, N)}"


async def test_a_dead_lettered_command_is_redriven_into_its_own_partition(
    partitioned: Bus, tenant: str
) -> None:
    bus = partitioned
    thread_id = new_id()
    stream = f"{COMMANDS_STREAM}_{partition_of(thread_id, N)}"
    attempts: list[int] = []

    async def handler(envelope: CommandEnvelope, delivery: Delivery) -> None:
        attempts.append(delivery.stream_seq)
        if len(attempts) == 1:
            raise CommandRejected(reason="probe_refused", detail="the first time")

    async with _running(_runtime_worker(bus, handler).run):
        await bus.commands.send(tenant, CancelRun(agency_id="a1", thread_id=thread_id))

        async def lettered() -> int:
            letters = await list_letters(bus.js, tenant=tenant)
            assert [(letter.reason, letter.source_stream) for letter in letters] == [
                ("probe_refused", stream)
            ]
            assert letters[0].replayable
            return letters[0].seq

        seq = await assert_eventually(lettered, timeout=20)
        await replay(bus.js, seq)

        async def handled_again() -> None:
            assert len(attempts) == 2
            assert await list_letters(bus.js, tenant=tenant) == []

        await assert_eventually(handled_again, timeout=20)


async def test_a_single_commands_stream_left_over_is_refused_while_it_holds_commands(
    partitioned: Bus, tenant: str
) -> None:
    """A store whose events are in partitions and commands in one stream (an earlier build's):
    its commands are not lost to a removal, and an empty one gives way to the partitions."""
    bus = partitioned
    for p in range(N):
        await bus.js.delete_stream(f"{COMMANDS_STREAM}_{p}")
    await bus.js.add_stream(command_stream(StreamSettings()))
    await bus.js.publish(f"tenant.{tenant}.cmd.runtime.cancel", encode(_cancel(tenant, new_id())))
    with pytest.raises(UpgradeError, match=f"{COMMANDS_STREAM} holds 1 command"):
        await provision(bus.js, StreamSettings(partitions=N))
    assert (await bus.js.stream_info(COMMANDS_STREAM)).state.messages == 1
    await bus.js.purge_stream(COMMANDS_STREAM)
    await provision(bus.js, StreamSettings(partitions=N))
    with pytest.raises(Exception, match="not found"):
        await bus.js.stream_info(COMMANDS_STREAM)
    assert await _held(bus) == dict.fromkeys(range(N), 0)
