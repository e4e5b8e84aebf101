"""One trace follows a run across services: the context travels in envelopes and headers."""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from tests.runtime.conftest import running_agents


async def test_a_runs_spans_share_the_trace_of_the_command_that_started_it(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer, spans: InMemorySpanExporter
) -> None:
    key = "trace-" + tenant
    llm.script(key, [ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "t"}}]),
                     ScriptStep(content="traced")])  # fmt: skip
    tracer = trace.get_tracer("tests")
    async with running_agents(bus, nats_url, tenant, llm) as agents:
        thread = await agents.thread()
        with tracer.start_as_current_span("client request") as root:
            trace_id = root.get_span_context().trace_id
            await agents.invoke(thread, key)
        await agents.wait_terminal(thread)
        await asyncio.sleep(0.2)  # the last consumer spans end after their handler returns
    names = {s.name for s in spans.get_finished_spans() if s.context.trace_id == trace_id}
    assert {
        "send runtime.invoke",  # the producer
        "handle runtime.invoke",  # the runtime's command worker
        "runtime-triggers request.accepted",  # the loop, woken by the accepted request
        "model openai:gpt-4.1-mini",  # the run's model calls
        "handle tool.requested",  # the tools service
        "runtime-triggers tool.output",  # the loop again, woken by the tool's result
    } <= names
