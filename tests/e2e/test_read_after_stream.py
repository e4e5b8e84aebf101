"""A client that saw an event on the thread's stream reads a state that has it: `/state`
answers once the read models have applied the thread's log as far as it goes."""

from __future__ import annotations

import json

import httpx
from httpx_sse import aconnect_sse

from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client


async def completed_on_stream(client: Client, thread: str, key: str) -> int:
    """Invoke the thread, follow its stream until the run completes; that event's seq."""
    timeout = httpx.Timeout(20, read=20)
    path = f"{client.path(thread)}/stream"
    async with aconnect_sse(client.http, "GET", path, timeout=timeout) as source:
        await client.invoke(thread, key)
        async for sse in source.aiter_sse():
            if sse.event == "message" and sse.data:
                event = json.loads(sse.data)
                if event["type"] == "run.completed":
                    return int(event["seq"])
    raise AssertionError("the stream ended before the run did")


async def test_state_read_right_after_the_stream_shows_the_completed_run(client: Client) -> None:
    for i in range(8):
        key = f"read-after-{i}-{client.agency}"
        client.llm.script(key, [ScriptStep(content=f"answer {i}")])
        thread = await client.thread()
        seq = await completed_on_stream(client, thread, key)
        state = await client.state(thread)
        assert state["run"]["status"] == "completed", (i, seq, state["run"])
        assert state["state"]["messages"][-1]["content"] == f"answer {i}"
        r = await client.http.get(f"{client.path(thread)}/runs")
        assert [run["status"] for run in r.json()] == ["completed"], r.json()
