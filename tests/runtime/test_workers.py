"""Two runtime workers consuming the same commands and triggers at once."""

from __future__ import annotations

import asyncio

from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.runtime.process import run_runtime
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
                # Two runs of their own on each thread, one after the other: the two
                # workers may accept them in either order (a `queue` one accepted second
                # would join the first run instead).
                await agents.invoke(thread, key, strategy="after")
                await agents.invoke(thread, key, strategy="after")
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


async def test_three_workers_with_a_slow_model_make_one_model_call_per_step(
    bus: Bus, nats_url: str, tenant: str, llm: FakeLLMServer
) -> None:
    """Only the worker holding a thread's lease calls the model: however the triggers of a
    thread spread over three workers while each call takes seconds, every step is asked
    once and every run completes."""
    key = "slow-three-" + tenant
    llm.script(key, [
        ScriptStep(
            tool_calls=[
                {"name": "lookup", "arguments": {"word": "a"}},
                {"name": "write_file", "arguments": {"path": "a.md", "content": "a"}},
            ],
            delay_ms=700,
        ),
        ScriptStep(tool_calls=[{"name": "ls", "arguments": {}}], delay_ms=1500),
        ScriptStep(content="done", delay_ms=500),
    ])  # fmt: skip
    provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
    stop = asyncio.Event()
    extra = [
        asyncio.create_task(run_runtime(nats_url, "unused", stop, make_system(), provider))
        for _ in range(2)
    ]
    try:
        async with running_agents(bus, nats_url, tenant, llm) as agents:
            threads = [await agents.thread() for _ in range(20)]
            for i, thread in enumerate(threads):
                await agents.invoke(thread, f"{key} [t{i}]")
            histories = await asyncio.gather(
                *(agents.wait_terminal(t, timeout=90) for t in threads)
            )
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*extra), timeout=15)
        await provider.close()
    received = llm.requests
    for i, events in enumerate(histories):
        types = [e.type for e in events]
        assert [t for t in types if t in RUN_TERMINAL_TYPES] == ["run.completed"], types
        assert types.count("model.started") == types.count("model.completed") == 3
        asked = [
            r for r in received if any(f"[t{i}]" in str(m.get("content")) for m in r["messages"])
        ]
        assert len(asked) == 3, f"thread {i}: {len(asked)} model requests for 3 steps"
