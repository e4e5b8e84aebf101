"""The bus's connection through a broker outage: it reconnects by itself, the outage reads
in the logs as a few lines (lost, refused, back), not as a traceback per attempt, and no
attempt leaves its socket open."""

from __future__ import annotations

import asyncio
import gc
import logging
import warnings
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream import connection
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.natsclient import connect
from agency.infra.jetstream.streams import provision
from agency.infra.keystore import current_cipher
from agency.infra.launch import NatsServer
from tests.helpers import assert_eventually, pipe


async def test_a_broker_outage_is_logged_as_lines_not_tracebacks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with NatsServer(tmp_path / "nats") as server, Bus(server.url, name="outage") as bus:
        await provision(bus.js)
        with structlog.testing.capture_logs() as logs, caplog.at_level(logging.DEBUG):
            await server.kill()

            async def refused() -> None:
                events = [entry["event"] for entry in logs]
                assert "nats disconnected; reconnecting" in events
                assert "nats connection lost or refused" in events

            await assert_eventually(refused, timeout=20)
            await server.start()

            async def back() -> None:
                assert any(entry["event"] == "nats reconnected" for entry in logs)
                await bus.js.stream_info(EVENTS_STREAM)

            await assert_eventually(back, timeout=30)
    lines = [entry for entry in logs if entry["event"].startswith("nats ")]
    assert all(entry["connection"] == "outage" for entry in lines)
    lost = next(e for e in lines if e["event"] == "nats connection lost or refused")
    assert lost["log_level"] == "warning" and lost["error"]
    tracebacks = [r for r in caplog.records if r.name.startswith("nats") and r.exc_info]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


async def test_closing_the_bus_is_not_logged_as_an_outage(tmp_path: Path) -> None:
    async with NatsServer(tmp_path / "nats") as server:
        bus = await Bus(server.url, name="closing").connect()
        with structlog.testing.capture_logs() as logs:
            await bus.close()
        assert bus_lines(logs) == []


def bus_lines(logs: list[MutableMapping[str, Any]]) -> list[str]:
    return [entry["event"] for entry in logs if str(entry["event"]).startswith("nats ")]


class SilentBroker:
    """A TCP proxy in front of NATS that, once `silent`, accepts connections and never
    answers them (no INFO), as a broker too loaded to speak would; it records when the
    client closes each such connection."""

    def __init__(self, target: str) -> None:
        host_port = target.rsplit("@", 1)[-1].removeprefix("nats://")
        host, port = host_port.split(":")
        self._target = (host, int(port))
        self._server: asyncio.Server | None = None
        self._piped: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.silent = False
        self.held: list[asyncio.Event] = []  # one per silent connection: set when closed
        self.port = 0

    def url(self, like: str) -> str:
        """`like` (credentials included) pointed at this proxy."""
        head, _, _ = like.rpartition(f"{self._target[0]}:{self._target[1]}")
        return f"{head}127.0.0.1:{self.port}"

    async def __aenter__(self) -> SilentBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 5)
        await asyncio.wait_for(self._server.wait_closed(), timeout=5)

    def cut(self) -> None:
        piped, self._piped = self._piped, set()
        for writer in piped:
            writer.transport.abort()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.silent:
                closed = asyncio.Event()
                self.held.append(closed)
                while await reader.read(65536):
                    pass
                closed.set()
                return
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            self._piped |= {writer, up_writer}
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except (ConnectionError, OSError):
            pass
        finally:
            writer.transport.abort()
            self._tasks.discard(task)


async def test_a_reconnect_attempt_the_broker_never_answers_is_closed(nats_url: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await _reconnect_through_a_silent_broker(nats_url)
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []


async def _reconnect_through_a_silent_broker(nats_url: str) -> None:
    async with (
        SilentBroker(nats_url) as broker,
        Bus(broker.url(nats_url), name="silent", connect_timeout=0.3) as bus,
    ):
        await bus.nc.flush(timeout=5)
        broker.silent = True
        broker.cut()

        async def abandoned_attempt_closed() -> None:
            assert len(broker.held) >= 2, "the client has not tried again yet"
            assert broker.held[0].is_set(), "the first unanswered attempt is still open"

        await assert_eventually(abandoned_attempt_closed, timeout=10)
        broker.silent = False

        async def back() -> None:
            await bus.nc.flush(timeout=1)

        await assert_eventually(back, timeout=15)
        await asyncio.wait_for(asyncio.gather(*(c.wait() for c in broker.held)), 5)


async def test_a_first_connect_the_broker_never_answers_leaves_nothing_open(
    nats_url: str,
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with SilentBroker(nats_url) as broker:
            broker.silent = True
            with pytest.raises(TimeoutError):
                await connect(broker.url(nats_url), connect_timeout=0.3, allow_reconnect=False)
            assert len(broker.held) == 1
            await asyncio.wait_for(broker.held[0].wait(), timeout=5)
        gc.collect()
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []


async def test_a_connect_cut_short_leaves_no_connection_nor_cipher_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service's start cancelled after its connection opened (reading the store's
    layout): the connection is closed and its cipher no longer installed, so the process
    goes on with the cipher it had, not one of a server that may be gone."""
    before = current_cipher()
    reading = asyncio.Event()

    async def stalled(*_: object) -> object:
        reading.set()
        await asyncio.Event().wait()  # never answers

    monkeypatch.setattr(connection, "_discover", stalled)
    async with NatsServer(tmp_path / "nats") as server:
        bus = Bus(server.url, name="cut")
        start = asyncio.create_task(bus.connect())
        await asyncio.wait_for(reading.wait(), timeout=10)
        assert current_cipher() is not before  # the new server's cipher, while it starts
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
        assert current_cipher() is before
        assert bus._nc is None
