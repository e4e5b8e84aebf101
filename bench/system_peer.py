"""The LangGraph side of `just bench system`: its resume, first token and create, one
sample at a time, so the benchmark can take them in turn with ours.

LangGraph's checkpoints go to a PostgreSQL server of their own, started here with the
embedded server's defaults (`fsync` on, 128 MB of shared buffers, as `agency up` starts
its own): its data and backends are never part of the memory measured for `agency up`,
whenever its phases run.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from agency.infra.launch import PostgresServer
from bench.http_system import BenchError
from bench.system_ours import ANSWER, resume_text, ttft_text

if TYPE_CHECKING:
    from bench.langgraph_hitl import HitlPeer

MODEL = "fake-model"
# The longest one LangGraph sample may take.
SAMPLE_TIMEOUT = 30.0


class LangGraphSide:
    """One sample of each phase at a time, on fresh thread ids."""

    def __init__(self, peer: HitlPeer, model_ttft_ms: float) -> None:
        self._peer = peer
        self._model_ttft_ms = model_ttft_ms
        self._prefix = f"lg-{time.time_ns()}"

    async def resume(self, index: int) -> float:
        """ms of `Command(resume=...)` on a thread parked at its interrupt, to the end."""
        thread = f"{self._prefix}-resume-{index}"
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            if not await self._peer.start(thread, resume_text(thread)):
                raise BenchError(f"LangGraph thread {thread} did not park at its interrupt")
            started = time.perf_counter()
            answer = await self._peer.resume(thread)
            elapsed = (time.perf_counter() - started) * 1000
        if answer != ANSWER:
            raise BenchError(f"LangGraph thread {thread} did not complete: {answer!r}")
        return elapsed

    async def first_token(self, index: int) -> float:
        """ms until the first text chunk of `astream(stream_mode="messages")`, less the
        fake model's own time to first token."""
        thread = f"{self._prefix}-ttft-{index}"
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            started = time.perf_counter()
            if not await self._peer.first_token(thread, ttft_text(thread)):
                raise BenchError(f"LangGraph thread {thread} streamed no token")
            return (time.perf_counter() - started) * 1000 - self._model_ttft_ms

    async def create(self, threads: int, clients: int) -> float:
        """Threads per second: `threads` fresh threads run to their first interrupt by
        `clients` concurrent tasks."""
        remaining = iter(range(threads))
        parked: list[bool] = []

        async def client() -> None:
            for i in remaining:
                parked.append(await self._peer.start(f"{self._prefix}-create-{i}", resume_text(i)))

        started = time.perf_counter()
        async with asyncio.timeout(60 + threads * 0.5), asyncio.TaskGroup() as tg:
            for _ in range(clients):
                tg.create_task(client())
        elapsed = time.perf_counter() - started
        if not all(parked) or len(parked) != threads:
            raise BenchError(f"{parked.count(False)} LangGraph threads did not park")
        return threads / elapsed


@asynccontextmanager
async def langgraph_side(model_url: str, model_ttft_ms: float) -> AsyncIterator[LangGraphSide]:
    """LangGraph over a PostgreSQL server of its own, until the block ends."""
    from bench.langgraph_hitl import HitlPeer  # its packages are the benchmark's

    with tempfile.TemporaryDirectory(prefix="agency-bench-langgraph-") as tmp:
        async with (
            PostgresServer(
                Path(tmp) / "pg", fsync=True, settings={"shared_buffers": "128MB"}
            ) as pg,
            HitlPeer(pg.url, model_url, model=MODEL) as peer,
        ):
            yield LangGraphSide(peer, model_ttft_ms)
