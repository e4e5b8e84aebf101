"""The broker's walls, tried as a hostile tenant would: tenant B holds its own API key and
the NATS credentials `agency tenants credentials` hands out, and aims at tenant A, which
uses the system over HTTP (the whole system runs: every service, the gateway, the API)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, BadRequestError, NotFoundError

from agency.contracts.codec import command_type_of, encode
from agency.contracts.commands import (
    Command,
    CommandEnvelope,
    InvokeThread,
    IssueApiKey,
    RevokeApiKey,
    SetTenantBudget,
)
from agency.contracts.envelope import utc_now
from agency.contracts.events import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.subjects import (
    COMMANDS_STREAM,
    DEAD_LETTER_STREAM,
    EVENT_TYPE_HEADER,
    EVENTS_STREAM,
)
from agency.infra.jetstream import dlq_admin
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import ALL_DURABLES
from agency.infra.jetstream.leases import LEASES_BUCKET
from agency.infra.launch import NatsServer
from agency.infra.nats_accounts import JS_API_PREFIX
from agency.infra.nats_auth import CredentialIssuer, TenantCredentials
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.workflows.engine.subjects import WORKFLOW_EVENTS
from tests.e2e.conftest import ADMIN, Client
from tests.helpers import assert_eventually, created_tenant

pytestmark = pytest.mark.slow


@pytest.fixture
def embedded(nats_server: NatsServer | None) -> NatsServer:
    if nats_server is None or nats_server.auth is None:
        pytest.skip("tenants' NATS users are issued on the embedded server only")
    return nats_server


async def _tenant(url: str) -> tuple[str, str]:
    async with httpx.AsyncClient(base_url=url, timeout=20) as admin:
        key, tenant_id, _ = await created_tenant(admin, ADMIN, "hostile")
    return tenant_id, key


@asynccontextmanager
async def as_tenant(
    server: NatsServer, tenant: str
) -> AsyncIterator[tuple[NATS, TenantCredentials]]:
    assert server.auth is not None
    issued = await CredentialIssuer(server.auth, server.url).issue(tenant)
    c = issued.credentials
    nc = await nats.connect(
        servers=issued.servers.split(","), user=c.user, password=c.password,
        inbox_prefix=c.inbox_prefix, connect_timeout=5,
    )  # fmt: skip
    try:
        yield nc, c
    finally:
        await nc.close()


@pytest.fixture
async def hostile(
    system_api: tuple[str, object], embedded: NatsServer
) -> AsyncIterator[tuple[NATS, TenantCredentials]]:
    tenant, _ = await _tenant(system_api[0])
    async with as_tenant(embedded, tenant) as connected:
        yield connected


def command(tenant: str, payload: Command, key: str) -> bytes:
    envelope = CommandEnvelope(
        command_id=new_id(), tenant_id=tenant, idempotency_key=key, ts=utc_now(),
        type=command_type_of(payload), payload=payload,
    )  # fmt: skip
    return encode(envelope)


async def test_a_tenant_cannot_take_another_tenants_duplicate_id(
    tenant: Client, hostile: tuple[NATS, TenantCredentials]
) -> None:
    nc, c = hostile
    thread = await tenant.thread()
    # The id A's invoke with idempotency key "k1" will carry, published first by B.
    forged = f"{tenant.tenant}:runtime.invoke:{thread}:k1"
    ack = await nc.jetstream(timeout=10).publish(
        f"tenant.{c.tenant_id}.cmd.runtime.invoke", b"{}", headers={"Nats-Msg-Id": forged}
    )
    assert ack.stream == COMMANDS_STREAM and not ack.duplicate
    tenant.llm.script("dedup-wall", [ScriptStep(content="done")])
    run = await tenant.invoke(thread, "dedup-wall", idempotencyKey="k1")
    state = await tenant.until(thread, lambda s: s["run"] and s["run"]["status"] == "completed")
    assert state["run"]["runId"] == run


async def test_a_tenant_cannot_revoke_another_tenants_api_key(
    tenant: Client, hostile: tuple[NATS, TenantCredentials], bus: Bus
) -> None:
    nc, c = hostile
    key = tenant.http.headers["Authorization"].removeprefix("Bearer ")
    victim_key_id = key.removeprefix("ak_").split("_", 1)[0]
    js = nc.jetstream(timeout=10)
    subject = f"tenant.{c.tenant_id}.cmd.registry."
    issue = IssueApiKey(key_id=victim_key_id, key_hash="0" * 64, name="mine")
    await js.publish(subject + "issue_api_key", command(c.tenant_id, issue, "i-" + new_id()))
    revoke = RevokeApiKey(key_id=victim_key_id)
    await js.publish(subject + "revoke_api_key", command(c.tenant_id, revoke, "r-" + new_id()))

    own_tenant = f"tenant.{c.tenant_id}.evt.tenant.{c.tenant_id}"

    async def revoked_in_its_own_log() -> None:
        try:
            msg = await bus.js.get_last_msg(EVENTS_STREAM, own_tenant)
        except NotFoundError:
            raise AssertionError("not revoked yet") from None
        assert (msg.headers or {}).get(EVENT_TYPE_HEADER) == "tenant.api_key_revoked"
        assert victim_key_id.encode() in msg.data

    await assert_eventually(revoked_in_its_own_log, timeout=20)
    # Every API process heard B's revocation; A's key of the same id still works.
    r = await tenant.http.get("/agencies")
    assert r.status_code == 200, r.text


async def test_a_tenant_cannot_create_or_update_consumers_it_does_not_own(
    tenant: Client, hostile: tuple[NATS, TenantCredentials], embedded: NatsServer, bus: Bus
) -> None:
    nc, c = hostile
    js = nc.jetstream(timeout=10, prefix=JS_API_PREFIX)
    own_filter = f"tenant.{c.tenant_id}.evt.>"
    ours = [d.name for d in ALL_DURABLES] + [WORKFLOW_EVENTS.name]
    before = {name: await bus.js.consumer_info(EVENTS_STREAM, name) for name in ours}

    def config(name: str, **changes: object) -> ConsumerConfig:
        base = ConsumerConfig(
            name=name, filter_subject=own_filter, deliver_subject=nc.new_inbox(),
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=30.0,
        )  # fmt: skip
        return base.evolve(**changes)

    # The services' durables, re-pointed at B's events: refused, each unchanged.
    for name in ours:
        with pytest.raises(BadRequestError, match="in use"):
            await js.add_consumer(EVENTS_STREAM, config(name))
        after = await bus.js.consumer_info(EVENTS_STREAM, name)
        assert after.config.filter_subjects == before[name].config.filter_subjects
        assert after.config.filter_subject == before[name].config.filter_subject
    # A's own consumer, by name: B cannot take it over.
    async with as_tenant(embedded, tenant.tenant) as (victim, vc):
        mine = "follow-" + new_id().lower()
        await victim.jetstream(timeout=10, prefix=JS_API_PREFIX).add_consumer(
            EVENTS_STREAM,
            ConsumerConfig(
                name=mine, filter_subject=f"tenant.{vc.tenant_id}.evt.>",
                deliver_subject=victim.new_inbox(), ack_policy=AckPolicy.NONE,
                inactive_threshold=60.0,
            ),
        )  # fmt: skip
        with pytest.raises(BadRequestError, match="in use"):
            await js.add_consumer(EVENTS_STREAM, config(mine))
        info = await bus.js.consumer_info(EVENTS_STREAM, mine)
        assert info.config.filter_subject == f"tenant.{vc.tenant_id}.evt.>"
        assert info.config.deliver_subject.startswith(vc.inbox_prefix + ".")
    # Push consumers delivering anywhere but its own inbox; filters beyond its own events.
    elsewhere = [
        f"_INBOX_{tenant.tenant}.stolen",
        f"tenant.{tenant.tenant}.cmd.runtime.invoke",
        f"{'dlq'}.{COMMANDS_STREAM}.forged",
        f"$KV.{LEASES_BUCKET}.forged",
        f"$JS.API.STREAM.DELETE.{EVENTS_STREAM}",
        "_INBOX.services",
    ]
    for deliver in elsewhere:
        with pytest.raises(BadRequestError, match="deliver_subject"):
            await js.add_consumer(
                EVENTS_STREAM, config("d" + new_id().lower(), deliver_subject=deliver)
            )
    for wider in (f"tenant.{tenant.tenant}.evt.>", "tenant.*.evt.>", ">"):
        with pytest.raises(BadRequestError, match="filter"):
            await js.add_consumer(
                EVENTS_STREAM, config("f" + new_id().lower(), filter_subject=wider)
            )
    # A filter of the previous layout (a type token after the thread) would match nothing.
    for typed in (
        f"tenant.{c.tenant_id}.evt.thread.x.>",
        f"tenant.{c.tenant_id}.evt.thread.x.run_completed",
    ):
        with pytest.raises(BadRequestError, match="Agency-Event-Type header"):
            await js.add_consumer(
                EVENTS_STREAM, config("f" + new_id().lower(), filter_subject=typed)
            )
    for unsafe in (
        {"ack_policy": AckPolicy.EXPLICIT},
        {"flow_control": True, "idle_heartbeat": 5.0},
    ):
        with pytest.raises(BadRequestError):
            await js.add_consumer(EVENTS_STREAM, config("u" + new_id().lower(), **unsafe))
    # Nothing reached A's command subjects or the dead letters, and the streams are whole.
    with pytest.raises(NotFoundError):
        await bus.js.get_last_msg(COMMANDS_STREAM, f"tenant.{tenant.tenant}.cmd.runtime.invoke")
    for stream in (EVENTS_STREAM, COMMANDS_STREAM, DEAD_LETTER_STREAM):
        await bus.js.stream_info(stream)


async def test_a_tenants_consumer_delivers_its_own_events_to_its_own_inbox(
    tenant: Client, embedded: NatsServer
) -> None:
    thread = await tenant.thread()
    async with as_tenant(embedded, tenant.tenant) as (nc, c):
        got: asyncio.Queue[str] = asyncio.Queue()

        async def keep(msg: object) -> None:
            await got.put(getattr(msg, "subject", ""))

        inbox = nc.new_inbox()
        await nc.subscribe(inbox, cb=keep)
        await nc.jetstream(timeout=10, prefix=JS_API_PREFIX).add_consumer(
            EVENTS_STREAM,
            ConsumerConfig(
                name="mine-" + new_id().lower(),
                filter_subject=f"tenant.{c.tenant_id}.evt.thread.{thread}",
                deliver_subject=inbox, ack_policy=AckPolicy.NONE, inactive_threshold=30.0,
            ),
        )  # fmt: skip
        subject = await asyncio.wait_for(got.get(), timeout=15)
    assert subject == f"tenant.{tenant.tenant}.evt.thread.{thread}"


async def test_a_command_naming_another_tenants_thread_is_dead_lettered_with_its_reason(
    tenant: Client, hostile: tuple[NATS, TenantCredentials], bus: Bus
) -> None:
    nc, c = hostile
    thread = await tenant.thread()
    invoke = InvokeThread(
        agency_id=tenant.agency, thread_id=thread, run_id="run_" + new_id(),
        messages=(ChatMessage(role="user", content="not yours"),),
    )  # fmt: skip
    key = "spoof-" + new_id()
    await nc.jetstream(timeout=10).publish(
        f"tenant.{c.tenant_id}.cmd.runtime.invoke", command(c.tenant_id, invoke, key)
    )

    async def dead_lettered() -> dlq_admin.LetterInfo:
        letters = await dlq_admin.list_letters(bus.js, tenant=c.tenant_id, limit=200)
        mine = [letter for letter in letters if key.encode() in letter.data]
        assert mine, letters
        return mine[-1]

    letter = await assert_eventually(dead_lettered, timeout=20)
    assert thread in letter.detail, letter.detail
    events = await bus.store.read(tenant.tenant, "thread", thread)
    assert [e.type for e in events] == ["thread.created"]


async def test_a_tenants_nats_user_reaches_nothing_outside_its_account(
    hostile: tuple[NATS, TenantCredentials], tenant: Client, bus: Bus
) -> None:
    nc, _ = hostile
    errors: list[str] = []
    heard: list[str] = []

    async def keep(msg: object) -> None:
        heard.append(getattr(msg, "subject", ""))

    for subject in (f"tenant.{tenant.tenant}.evt.>", "_INBOX.>", "dlq.>", f"$KV.{LEASES_BUCKET}.>"):
        try:
            await nc.subscribe(subject, cb=keep)
        except NatsError as e:
            errors.append(str(e))
    await nc.flush(timeout=10)
    await tenant.thread()  # A's events flow meanwhile
    await bus.nc.publish("_INBOX.services.reply", b"secret")
    await bus.nc.flush(timeout=10)
    with pytest.raises((NatsError, TimeoutError)):
        await nc.request(f"$JS.API.STREAM.DELETE.{EVENTS_STREAM}", b"", timeout=2)
    with pytest.raises((NatsError, TimeoutError)):
        await nc.request(f"{JS_API_PREFIX}.STREAM.PURGE.{COMMANDS_STREAM}", b"", timeout=2)
    await nc.flush(timeout=10)
    assert heard == []
    await bus.js.stream_info(EVENTS_STREAM)


async def test_a_tenant_cannot_set_its_own_spend_budget_over_nats(
    hostile: tuple[NATS, TenantCredentials], bus: Bus
) -> None:
    """Only the operator sets a tenant's budget: the gateway refuses the command."""
    nc, c = hostile
    raise_it = SetTenantBudget(tokens=0, usd=0.0)  # 0: no budget at all
    with pytest.raises(APIError) as refused:
        await nc.jetstream(timeout=10).publish(
            f"tenant.{c.tenant_id}.cmd.registry.set_tenant_budget",
            command(c.tenant_id, raise_it, "b-" + new_id()),
        )
    assert refused.value.code == 403 and "operator" in str(refused.value.description)
    with pytest.raises(NotFoundError):
        await bus.js.get_last_msg(
            COMMANDS_STREAM, f"tenant.{c.tenant_id}.cmd.registry.set_tenant_budget"
        )
