"""The whole system on a log of three partitions: threads run to completion through every
service, each thread's events in the stream of its partition, and each replays from there
to the state the read models show."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from agency.contracts.partitions import EventLayout
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.launch import NatsServer
from agency.infra.nats_accounts import JS_API_PREFIX
from agency.infra.nats_auth import CredentialIssuer
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, Client, running_system
from tests.helpers import created_tenant

PARTITIONS = 3
LAYOUT = EventLayout(PARTITIONS)
# Threads are made until every partition has some, at most this many.
MAX_THREADS = 30


def done(state: dict[str, Any]) -> bool:
    return state["run"]["status"] in ("completed", "error", "canceled")


@pytest.fixture(scope="module")
async def partitioned(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> AsyncIterator[tuple[NatsServer, Client]]:
    """A server of its own, its log provisioned in three partitions, and the system on it."""
    store = Path(tmp_path_factory.mktemp("partitioned")) / "nats"
    server = NatsServer(store, sync_interval="default", auth=True, event_partitions=PARTITIONS)
    async with server:
        async with Bus(server.admin_url, name="provision") as admin:
            await provision(admin.js, StreamSettings(partitions=PARTITIONS), nc=admin.nc)
        async with (
            FakeLLMServer(instant=True) as llm,
            running_system(server.admin_url, database_url, server, llm) as url,
        ):
            async with httpx.AsyncClient(base_url=url, timeout=20) as http:
                key, tenant, agency = await created_tenant(http, ADMIN, "parts", "parts")
            assert agency is not None
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx.AsyncClient(base_url=url, timeout=20, headers=headers) as http:
                yield server, Client(http=http, llm=llm, agency=agency, tenant=tenant)


async def test_threads_run_in_their_partitions_and_replay_to_the_same_state(
    partitioned: tuple[NatsServer, Client],
) -> None:
    server, client = partitioned
    threads: list[str] = []
    while {LAYOUT.partition(t) for t in threads} != set(range(PARTITIONS)):
        assert len(threads) < MAX_THREADS, "thread ids never reached every partition"
        threads.append(await client.thread())
    for n, thread in enumerate(threads):
        client.llm.script(f"part-{n}-{client.agency}", [ScriptStep(content=f"answer {n}")])
        await client.invoke(thread, f"part-{n}-{client.agency}")
    states = {thread: await client.until(thread, done, timeout=60) for thread in threads}

    async with Bus(server.admin_url, name="check") as bus:
        assert bus.layout == LAYOUT
        held: dict[str, int] = {}
        for stream in LAYOUT.streams:
            info = await bus.js.stream_info(stream)
            held[stream] = info.state.messages
            assert (await bus.js.consumer_info(stream, "runtime-triggers")).num_pending == 0
        assert all(held.values()), held  # the threads' events spread over every stream
        for n, thread in enumerate(threads):
            stream = LAYOUT.stream_of(thread)
            subject = LAYOUT.subject(client.tenant, "thread", thread)
            first = await bus.js.get_msg(stream, seq=1, subject=subject, next=True)
            assert first.subject == subject
            for other in set(LAYOUT.streams) - {stream}:
                with pytest.raises(Exception, match="no message found"):
                    await bus.js.get_msg(
                        other, seq=1, subject=f"tenant.*.evt.*.thread.{thread}", next=True
                    )

            events = await bus.store.read(client.tenant, "thread", thread)
            replayed = ThreadState(tenant_id=client.tenant, thread_id=thread)
            for event in events:
                assert event.subject == subject
                replayed = replayed.apply(event)
            state = states[thread]
            assert state["run"]["status"] == "completed"
            assert [m.content for m in replayed.messages] == [
                m["content"] for m in state["state"]["messages"]
            ]
            assert replayed.messages[-1].content == f"answer {n}"
            assert replayed.runs[-1].status == "completed"


async def test_a_tenant_reads_its_thread_from_its_partition_over_nats(
    partitioned: tuple[NatsServer, Client],
) -> None:
    """With the tenant's own credentials: a consumer on the thread's partition stream, and
    a direct get of its last event there; a filter naming another partition is refused."""
    server, client = partitioned
    thread = await client.thread()
    assert server.auth is not None
    issued = await CredentialIssuer(server.auth, server.url).issue(client.tenant)
    c = issued.credentials
    tenant_nc = await nats.connect(
        servers=issued.servers.split(","), user=c.user, password=c.password,
        inbox_prefix=c.inbox_prefix, connect_timeout=5,
    )  # fmt: skip
    try:
        js = tenant_nc.jetstream(timeout=5, prefix=JS_API_PREFIX)
        stream = LAYOUT.stream_of(thread)
        subject = LAYOUT.subject(client.tenant, "thread", thread)
        last = await js.get_last_msg(stream, subject, direct=True)
        assert json.loads(last.data)["type"] == "thread.created"

        got: asyncio.Queue[str] = asyncio.Queue()

        async def on_event(msg: nats.aio.msg.Msg) -> None:
            if msg.data:
                got.put_nowait(json.loads(msg.data)["type"])

        deliver = tenant_nc.new_inbox()
        await tenant_nc.subscribe(deliver, cb=on_event)
        follow = ConsumerConfig(
            name="follow-" + thread.lower(),
            filter_subject=subject,
            deliver_subject=deliver,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
        )
        await js.add_consumer(stream, follow)
        assert await asyncio.wait_for(got.get(), 10) == "thread.created"

        other = (LAYOUT.partition(thread) + 1) % PARTITIONS
        wrong = ConsumerConfig(
            name="wrong-" + thread.lower(),
            filter_subject=f"tenant.{client.tenant}.evt.{other}.thread.{thread}",
            deliver_subject=tenant_nc.new_inbox(),
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
        )
        with pytest.raises(Exception, match="every filter must lie under"):
            await js.add_consumer(stream, wrong)
    finally:
        await tenant_nc.close()
