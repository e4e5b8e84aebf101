"""The bus's connection through a broker outage: it reconnects by itself, and the outage
reads in the logs as a few lines (lost, refused, back), not as a traceback per attempt."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from contracts.subjects import EVENTS_STREAM
from infra.jetstream.connection import Bus
from infra.jetstream.streams import provision
from infra.launch import NatsServer
from tests.helpers import assert_eventually


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
