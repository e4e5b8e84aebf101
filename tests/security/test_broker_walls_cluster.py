"""The broker's walls on the 3-node cluster: the tenants' accounts, their imports and the
gateway hold when each party is connected to a different node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import BadRequestError

from agency.contracts.ids import new_id
from agency.contracts.subjects import COMMANDS_STREAM, EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import StreamSettings, provision
from agency.infra.launch import NatsCluster
from agency.infra.nats_accounts import GATEWAY_ROLE, JS_API_PREFIX
from agency.infra.nats_auth import CredentialIssuer, TenantCredentials
from agency.services.gateway.service import Gateway
from tests.helpers import assert_eventually

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@asynccontextmanager
async def on_node(cluster: NatsCluster, node: int, c: TenantCredentials) -> AsyncIterator[NATS]:
    nc = await nats.connect(
        servers=[cluster.node(node).url], user=c.user, password=c.password,
        inbox_prefix=c.inbox_prefix, connect_timeout=5,
    )  # fmt: skip
    try:
        yield nc
    finally:
        await nc.close()


def follow(nc: NATS, c: TenantCredentials, name: str, deliver: str) -> ConsumerConfig:
    return ConsumerConfig(
        name=name, filter_subject=f"tenant.{c.tenant_id}.evt.>", deliver_subject=deliver,
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.NEW, inactive_threshold=60.0,
    )  # fmt: skip


async def test_tenants_on_different_nodes_keep_to_their_own_accounts(tmp_path: Path) -> None:
    async with NatsCluster(tmp_path / "cluster", auth=True) as cluster:
        assert cluster.auth is not None
        async with Bus(cluster.admin_url, name="cluster-admin") as admin:
            await provision(admin.js, StreamSettings(replicas=3))
            stop = asyncio.Event()
            gateway_url = cluster.auth.url(cluster.node(2).url, GATEWAY_ROLE)
            async with Bus(gateway_url, name="agency-gateway") as gateway_bus:
                gateway = asyncio.create_task(Gateway(gateway_bus).run(stop))
                try:
                    await _walls_hold(cluster, admin)
                finally:
                    stop.set()
                    await asyncio.wait_for(gateway, timeout=15)


async def _walls_hold(cluster: NatsCluster, admin: Bus) -> None:
    assert cluster.auth is not None
    issuer = CredentialIssuer(cluster.auth, cluster.url)
    a = (await issuer.issue("a" + new_id().lower())).credentials
    b = (await issuer.issue("b" + new_id().lower())).credentials
    async with on_node(cluster, 0, a) as victim, on_node(cluster, 1, b) as hostile:
        got: asyncio.Queue[str] = asyncio.Queue()

        async def keep(msg: object) -> None:
            await got.put(getattr(msg, "subject", ""))

        inbox = victim.new_inbox()
        await victim.subscribe(inbox, cb=keep)
        name = "follow-" + new_id().lower()
        victim_js = victim.jetstream(timeout=10, prefix=JS_API_PREFIX)
        await victim_js.add_consumer(EVENTS_STREAM, follow(victim, a, name, inbox))

        hostile_js = hostile.jetstream(timeout=10, prefix=JS_API_PREFIX)
        with pytest.raises(BadRequestError, match="in use"):
            await hostile_js.add_consumer(
                EVENTS_STREAM, follow(hostile, b, name, hostile.new_inbox())
            )
        with pytest.raises(BadRequestError, match="deliver_subject"):
            await hostile_js.add_consumer(
                EVENTS_STREAM, follow(hostile, b, "steal-" + new_id().lower(), inbox)
            )
        # B takes A's next duplicate id first; A's command is stored all the same.
        msg_id = f"{a.tenant_id}:runtime.invoke:order-1"
        await hostile_js.publish(
            f"tenant.{b.tenant_id}.cmd.runtime.invoke", b"{}", headers={"Nats-Msg-Id": msg_id}
        )
        ack = await victim_js.publish(
            f"tenant.{a.tenant_id}.cmd.runtime.invoke", b"{}", headers={"Nats-Msg-Id": msg_id}
        )
        assert ack.stream == COMMANDS_STREAM and not ack.duplicate
        stored = await admin.js.get_last_msg(
            COMMANDS_STREAM, f"tenant.{a.tenant_id}.cmd.runtime.invoke"
        )
        assert stored.seq == ack.seq

        # A's events reach A's consumer across the nodes, and never B.
        subject = f"tenant.{a.tenant_id}.evt.thread.t1.thread_created"

        async def delivered() -> None:
            await admin.js.publish(subject, b"{}")
            assert await asyncio.wait_for(got.get(), timeout=2) == subject

        await assert_eventually(delivered, timeout=30)
        heard: list[str] = []

        async def overheard(msg: object) -> None:
            heard.append(getattr(msg, "subject", ""))

        await hostile.subscribe(f"{b.inbox_prefix}.>", cb=overheard)
        await hostile.flush(timeout=10)
        await admin.js.publish(subject, b"{}")
        assert await asyncio.wait_for(got.get(), timeout=10) == subject
        assert heard == []
