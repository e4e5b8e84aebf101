"""Two runtime workers consuming the same commands and triggers at once."""

from __future__ import annotations

import asyncio

from contracts.events.run import RUN_TERMINAL_TYPES
from infra.jetstream.connection import Bus
from services.llm.fake_scripts import ScriptStep
from services.llm.fake_server import FakeLLMServer
from services.llm.provider import OpenAIProvider
from services.runtime.service import run_runtime
from tests.runtime.conftest import make_system, running_agents


async def test_two_runtime_workers_keep_every_thread_sequential(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    key = "two-workers-" + tenant
    llm.script(key, [
        ScriptStep(tool_calls=[
            {"name": "lookup", "arguments": {"word": "a"}},
            {"name": "write_file", "arguments": {"path": "a.md", "content": "a"}},
        ]),
        ScriptStep(tool_calls=[{"name": "ls", "arguments": {}}]),
        ScriptStep(content="done"),
    ])  # fmt: skip
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    stop = asyncio.Event()
    # A second worker beside the one `running_agents` starts.
    second = asyncio.create_task(run_runtime(nats_url, "unused", stop, make_system(), provider))
    try:
        async with running_agents(bus, nats_url, tenant, llm) as agents:
            threads = [await agents.thread() for _ in range(12)]
            for thread in threads:
                await agents.invoke(thread, key)
                await agents.invoke(thread, key)  # a queued second run on each thread
            histories = await asyncio.gather(
                *(agents.wait_terminal(t, count=2, timeout=60) for t in threads)
            )
    finally:
        stop.set()
        await asyncio.wait_for(second, timeout=15)
        await provider.close()
    for events in histories:
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert len({e.envelope.event_id for e in events}) == len(events)
        assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == [
            "run.completed",
            "run.completed",
        ]
        results = [
            e.payload.tool_call_id for e in events if e.type in ("tool.output", "tool.error")
        ]
        assert len(results) == len(set(results))
