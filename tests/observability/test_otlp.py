"""The SDK and the OTLP exporter switch on by the standard `OTEL_*` variables."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agency.services.observability.tracing import wanted

REPO = Path(__file__).resolve().parents[2]

EMIT = """
from opentelemetry import trace
from agency.services.observability.tracing import configure_tracing, shutdown_tracing
provider = configure_tracing("agency-probe")
assert provider is not None, "tracing was not switched on"
with trace.get_tracer("probe").start_as_current_span("probe-span-42"):
    pass
shutdown_tracing(provider)
"""


def test_only_the_otel_variables_switch_the_exporter_on() -> None:
    assert not wanted({})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not wanted(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}
    )


async def test_spans_reach_an_otlp_collector_named_by_the_environment() -> None:
    received: list[tuple[str, bytes]] = []
    got = asyncio.Event()

    async def collector(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = next(int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length"))
        body = await reader.readexactly(length)
        received.append((lines[0], body))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
        )
        await writer.drain()
        writer.close()
        got.set()

    server = await asyncio.start_server(collector, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_SERVICE_NAME": "probe-svc",
    }
    async with server:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", EMIT, cwd=REPO, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, err.decode()
        await asyncio.wait_for(got.wait(), timeout=10)
    request_line, body = received[0]
    assert request_line.startswith("POST /v1/traces ")
    assert b"probe-span-42" in body and b"probe-svc" in body
