"""Small helpers for driving runs with the SDK: collect a stream, wait for a run status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart

WAIT = 30.0


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


async def collect(parts: AsyncIterator[StreamPart], timeout: float = WAIT) -> list[StreamPart]:
    async with asyncio.timeout(timeout):
        return [part async for part in parts]


async def until_status(
    client: LangGraphClient, thread_id: str, run_id: str, wanted: set[str], timeout: float = WAIT
) -> dict[str, Any]:
    """Poll the run until its status is one of `wanted` (bounded)."""
    async with asyncio.timeout(timeout):
        while True:
            run = await client.runs.get(thread_id, run_id)
            if run["status"] in wanted:
                return dict(run)
            await asyncio.sleep(0.05)
