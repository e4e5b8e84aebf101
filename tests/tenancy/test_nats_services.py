"""The broker's side of the services: the embedded server keeps its users private and
refuses anonymous clients; each service's user can do what the service needs, nothing
more (no forged events from the projector, no stream administration for anyone)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from agency.contracts.ids import new_id
from agency.contracts.subjects import COMMANDS_STREAM, DEAD_LETTER_STREAM, EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.infra.nats_auth import AUTH_CONF, AUTH_FILE
from tests.helpers import assert_eventually
from tests.tenancy.test_nats_tenant import REFUSED, embedded  # noqa: F401


async def test_the_embedded_server_refuses_anonymous_clients_and_keeps_its_users_private(
    tmp_path: Path,
) -> None:
    async with NatsServer(tmp_path / "nats", sync_interval="default", auth=True) as server:
        assert server.auth is not None
        for name in (AUTH_FILE, AUTH_CONF):
            assert (server.auth.directory / name).stat().st_mode & 0o777 == 0o600, name
        # The protocol itself: a CONNECT without (or with wrong) credentials is refused.
        assert await handshake(server.url, {}) == "-ERR 'Authorization Violation'"
        wrong = {"user": "admin", "pass": "wrong"}
        assert await handshake(server.url, wrong) == "-ERR 'Authorization Violation'"
        nc = await nats.connect(server.admin_url, connect_timeout=5, allow_reconnect=False)
        await nc.close()


async def handshake(url: str, credentials: dict[str, str]) -> str:
    """What the server answers a client's CONNECT and PING: `PONG`, or its error."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        async with asyncio.timeout(10):
            info = await reader.readline()
            assert info.startswith(b"INFO ")
            connect = {"verbose": False, "pedantic": False, **credentials}
            writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
            await writer.drain()
            return (await reader.readline()).decode().strip()
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@asynccontextmanager
async def connect_as(server: NatsServer, role: str, errors: list[str]) -> AsyncIterator[NATS]:
    assert server.auth is not None

    async def on_error(error: Exception) -> None:
        errors.append(str(error))

    nc = await nats.connect(server.auth.url(server.url, role), error_cb=on_error, connect_timeout=5)
    try:
        yield nc
    finally:
        await nc.close()


async def test_each_service_user_is_refused_what_its_service_does_not_do(
    bus: Bus,
    embedded: NatsServer,  # noqa: F811
    tenant: str,
) -> None:
    forged = f"tenant.{tenant}.evt.tenant.{tenant}"
    errors: list[str] = []
    # The projector only reads: no event, no command, however well formed.
    async with connect_as(embedded, "projector", errors) as nc:
        js = nc.jetstream(timeout=3)
        with pytest.raises(REFUSED):
            await js.publish(forged, b"{}")
        with pytest.raises(REFUSED):
            await js.publish(f"tenant.{tenant}.cmd.runtime.invoke", b"{}")
        assert (await js.stream_info(EVENTS_STREAM)).config.name == EVENTS_STREAM
        # ... but what it cannot project, it dead-letters.
        letter = await js.publish("dlq.projection-test.undecodable", b"x")
        assert letter.stream == DEAD_LETTER_STREAM
    # No service administers streams; only the API may delete a dead letter.
    for role in ("registry", "runtime", "tools", "subagents", "workflows", "api"):
        async with connect_as(embedded, role, errors) as nc:
            # A refused request gets no reply: a short wait, the refusal itself is counted
            # from the server's errors below.
            js = nc.jetstream(timeout=0.5)
            with pytest.raises(REFUSED):
                await js.delete_stream(EVENTS_STREAM)
            with pytest.raises(REFUSED):
                await js.purge_stream(COMMANDS_STREAM)
            with pytest.raises(REFUSED):
                await js.update_stream(StreamConfig(name=EVENTS_STREAM, subjects=[">"]))
            with pytest.raises(REFUSED):
                await js.add_stream(StreamConfig(name="X" + new_id(), subjects=["x.>"]))
            if role != "api":
                with pytest.raises(REFUSED):
                    await js.delete_msg(DEAD_LETTER_STREAM, 1)
            await nc.flush(timeout=10)

    async def refused() -> None:
        assert sum("permissions violation" in e.lower() for e in errors) >= 2 + 6 * 4 + 5

    await assert_eventually(refused, timeout=15)
    with pytest.raises(NotFoundError):
        await bus.js.get_msg(EVENTS_STREAM, subject=forged)
    info = await bus.js.stream_info(EVENTS_STREAM)
    assert info.config.subjects == ["tenant.*.evt.>"]
