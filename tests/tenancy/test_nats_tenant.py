"""A tenant's NATS credentials: its own commands and events, nothing of anyone else's.

The services run as their own users (the permissions `agency up` gives them); the tenant's
client connects with credentials issued the way `agency tenants credentials` issues them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError, NoRespondersError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.errors import Error as JetStreamError, NotFoundError

from agency.contracts.codec import encode
from agency.contracts.commands import CommandEnvelope, InvokeThread
from agency.contracts.envelope import utc_now
from agency.contracts.events import ChatMessage
from agency.contracts.ids import new_id
from agency.contracts.reexecution import ReexecutionRequest
from agency.contracts.schema import write_schemas
from agency.contracts.subjects import COMMANDS_STREAM, EVENTS_STREAM, reexecution_subject
from agency.infra.jetstream import dlq_admin
from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.infra.nats_accounts import JS_API_PREFIX
from agency.infra.nats_auth import SERVICE_ROLES, CredentialIssuer, IssuedCredentials
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.helpers import assert_eventually
from tests.runtime.conftest import Agents, running_agents

REPO = Path(__file__).resolve().parents[2]
REFUSED = (NatsError, JetStreamError, TimeoutError)


@pytest.fixture
def embedded(nats_server: NatsServer | None) -> NatsServer:
    if nats_server is None or nats_server.auth is None:
        pytest.skip("the tenant's users are managed on the embedded server only")
    return nats_server


@asynccontextmanager
async def agents_as_services(
    bus: Bus, server: NatsServer, tenant: str, llm: FakeLLMServer
) -> AsyncIterator[Agents]:
    assert server.auth is not None
    urls = {role: server.auth.url(server.url, role) for role in SERVICE_ROLES}
    services = ("registry", "runtime", "tools", "subagents", "gateway")
    async with running_agents(
        bus, server.admin_url, tenant, llm, services=services, nats_urls=urls
    ) as agents:
        yield agents


async def issue(server: NatsServer, tenant: str) -> IssuedCredentials:
    assert server.auth is not None
    return await CredentialIssuer(server.auth, server.url).issue(tenant)


@asynccontextmanager
async def connect_as(issued: IssuedCredentials, errors: list[str]) -> AsyncIterator[NATS]:
    async def on_error(error: Exception) -> None:
        errors.append(str(error))

    c = issued.credentials
    nc = await nats.connect(
        servers=issued.servers.split(","), user=c.user, password=c.password,
        inbox_prefix=c.inbox_prefix, error_cb=on_error, connect_timeout=5,
    )  # fmt: skip
    try:
        yield nc
    finally:
        await nc.close()


async def test_a_tenants_credentials_invoke_its_thread_and_follow_its_events_with_the_example(
    bus: Bus, embedded: NatsServer, tenant: str, llm: FakeLLMServer, tmp_path: Path
) -> None:
    key = "nats-example-" + tenant
    llm.script(key, [ScriptStep(content="answered over NATS")])
    write_schemas(tmp_path / "schema")
    async with agents_as_services(bus, embedded, tenant, llm) as agents:
        thread = await agents.thread()
        issued = await issue(embedded, tenant)
        c = issued.credentials
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "examples/nats_client.py", "--servers", issued.servers,
            "--user", c.user, "--password", c.password, "--inbox-prefix", c.inbox_prefix,
            "--tenant", tenant, "--agency", agents.agency, "--thread", thread,
            "--message", key, "--schemas", str(tmp_path / "schema"), "--timeout", "80",
            cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=100)
    assert proc.returncode == 0, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    run_id = lines[0]["invoked"]
    events = lines[1:]
    assert {e["tenant_id"] for e in events} == {tenant}
    assert [e["type"] for e in events][-1] == "run.completed"
    # A thread's content is sealed on the log (docs/data.md): the tenant's NATS client sees
    # each event, its envelope and figures, and reads the content over HTTP.
    appended = [e for e in events if e["type"] == "message.appended"]
    assert appended and all("sealed" in e and "message" not in e["payload"] for e in appended)
    assert "answered over NATS" not in out.decode()
    assert all(e["run_id"] in (run_id, None) for e in events)


async def test_a_tenants_credentials_are_refused_on_another_tenants_subjects(
    bus: Bus, embedded: NatsServer, tenant: str
) -> None:
    other = "t" + new_id().lower()
    errors: list[str] = []
    async with connect_as(await issue(embedded, tenant), errors) as nc:
        js = nc.jetstream(timeout=3, prefix=JS_API_PREFIX)
        # Commands to another tenant: the broker refuses them, nothing is stored.
        with pytest.raises(REFUSED):
            await js.publish(f"tenant.{other}.cmd.runtime.invoke", b"{}")
        # Events are written by the services only, even on its own subjects: no forged key.
        forged = f"tenant.{tenant}.evt.tenant.{tenant}"
        with pytest.raises(REFUSED):
            await js.publish(forged, b"{}")
        # Another tenant's events, live or through a consumer.
        await nc.subscribe(f"tenant.{other}.evt.>")
        with pytest.raises(REFUSED):
            await js.add_consumer(
                EVENTS_STREAM,
                ConsumerConfig(
                    name="peek" + new_id().lower(), filter_subject=f"tenant.{other}.evt.>",
                    deliver_subject=nc.new_inbox(), ack_policy=AckPolicy.NONE,
                ),
            )  # fmt: skip
        await nc.flush(timeout=10)

    async def refused() -> None:
        text = " ".join(errors).lower()
        assert text.count("permissions violation") >= 3, errors
        assert f"tenant.{other}.evt.>" in " ".join(errors)

    await assert_eventually(refused, timeout=15)
    with pytest.raises(NotFoundError):
        await bus.js.get_msg(COMMANDS_STREAM, subject=f"tenant.{other}.cmd.runtime.invoke")
    with pytest.raises(NotFoundError):
        await bus.js.get_msg(EVENTS_STREAM, subject=forged)


async def test_a_tenants_credentials_are_refused_on_another_inbox(
    bus: Bus, embedded: NatsServer, tenant: str
) -> None:
    other = "t" + new_id().lower()
    errors: list[str] = []
    async with connect_as(await issue(embedded, tenant), errors) as nc:
        got: list[bytes] = []

        async def keep(msg: object) -> None:
            got.append(getattr(msg, "data", b""))

        await nc.subscribe(f"_INBOX_{other}.>", cb=keep)
        await nc.subscribe("_INBOX.>", cb=keep)  # the services' replies
        await nc.flush(timeout=10)
        await bus.nc.publish(f"_INBOX_{other}.reply", b"secret of another tenant")
        await bus.nc.publish("_INBOX.service.reply", b"secret of a service")
        await bus.nc.flush(timeout=10)

        async def refused() -> None:
            assert sum("permissions violation" in e.lower() for e in errors) >= 2, errors

        await assert_eventually(refused, timeout=15)
        # Its own inbox works (a round trip through its own prefix).
        own = nc.new_inbox()
        sub = await nc.subscribe(own)
        await nc.flush(timeout=10)  # the server knows the subscription before we publish

        async def delivered() -> None:
            # Sent again until it arrives: a reload of the server's users (another test's
            # credentials) may be under way.
            await bus.nc.publish(own, b"for you")
            try:
                msg = await sub.next_msg(timeout=1)
            except nats.errors.TimeoutError:
                raise AssertionError(f"nothing on {own}; errors: {errors}") from None
            assert msg.data == b"for you", msg.data

        await assert_eventually(delivered, timeout=20)
    assert got == []


async def test_a_tenants_credentials_cannot_delete_purge_or_edit_streams_or_our_consumers(
    bus: Bus, embedded: NatsServer, tenant: str
) -> None:
    errors: list[str] = []
    async with connect_as(await issue(embedded, tenant), errors) as nc:
        js = nc.jetstream(timeout=3, prefix=JS_API_PREFIX)
        with pytest.raises(REFUSED):
            await js.delete_stream(EVENTS_STREAM)
        with pytest.raises(REFUSED):
            await js.purge_stream(COMMANDS_STREAM)
        with pytest.raises(REFUSED):
            await js.update_stream(StreamConfig(name=EVENTS_STREAM, subjects=[">"]))
        with pytest.raises(REFUSED):
            await js.stream_info(EVENTS_STREAM)  # would list every tenant's subjects
        # One of our durables, re-filtered to its own subjects: refused, not updated.
        with pytest.raises(REFUSED):
            await js.add_consumer(
                EVENTS_STREAM,
                ConsumerConfig(
                    name="tools", durable_name="tools", filter_subject=f"tenant.{tenant}.evt.>",
                    ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
                ),
            )  # fmt: skip
    info = await bus.js.stream_info(EVENTS_STREAM)
    assert info.config.subjects == ["tenant.*.evt.>"]
    tools = await bus.js.consumer_info(EVENTS_STREAM, "tools")
    assert tools.config.filter_subject != f"tenant.{tenant}.evt.>"


async def test_a_command_on_its_own_subject_naming_another_tenant_is_dead_lettered(
    bus: Bus, embedded: NatsServer, tenant: str, llm: FakeLLMServer
) -> None:
    victim = "t" + new_id().lower()
    async with agents_as_services(bus, embedded, victim, llm) as agents:
        thread = await agents.thread()
        envelope = CommandEnvelope(
            command_id=new_id(), tenant_id=victim, idempotency_key="spoof-" + victim,
            ts=utc_now(), type="runtime.invoke",
            payload=InvokeThread(
                agency_id=agents.agency, thread_id=thread, run_id="run_" + new_id(),
                messages=(ChatMessage(role="user", content="spoofed"),),
            ),
        )  # fmt: skip
        async with connect_as(await issue(embedded, tenant), []) as nc:
            await nc.jetstream(timeout=5, prefix=JS_API_PREFIX).publish(
                f"tenant.{tenant}.cmd.runtime.invoke", encode(envelope)
            )

        async def dead_lettered() -> dlq_admin.LetterInfo:
            letters = await dlq_admin.list_letters(bus.js, tenant=tenant, reason="undecodable")
            assert letters
            return letters[-1]

        letter = await assert_eventually(dead_lettered, timeout=15)
        assert victim in letter.detail
        decoded = msgspec.json.decode(letter.data)
        assert decoded["tenant_id"] == victim
        assert [e.type for e in await agents.events(thread)] == ["thread.created"]


async def test_a_tenants_credentials_cannot_ask_the_runtime_to_re_execute(
    bus: Bus, embedded: NatsServer, tenant: str, llm: FakeLLMServer
) -> None:
    """Re-execution requests are the system's own: the runtime answers the API's user, and
    a tenant's user is refused, even for its own threads."""
    assert embedded.auth is not None
    ask = msgspec.json.encode(ReexecutionRequest(thread_id="nosuchthread"))
    async with (
        agents_as_services(bus, embedded, tenant, llm),
        Bus(embedded.auth.url(embedded.url, "api"), name="as-api") as api,
    ):

        async def answered() -> None:
            try:
                msg = await api.nc.request(reexecution_subject(tenant), ask, timeout=5)
            except NoRespondersError as e:
                raise AssertionError("no runtime answers yet") from e
            assert b'"not_found"' in msg.data

        await assert_eventually(answered, timeout=15)
        errors: list[str] = []
        async with connect_as(await issue(embedded, tenant), errors) as nc:
            with pytest.raises(REFUSED):
                await nc.request(reexecution_subject(tenant), ask, timeout=2)

            async def refused() -> None:
                assert "permissions violation" in " ".join(errors).lower(), errors

            await assert_eventually(refused, timeout=15)
