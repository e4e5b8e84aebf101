"""Our side of `just bench system`: every phase driven over HTTP against `agency up`.

Each function measures one thing and checks that what it measured really happened (the run
parked on its approval, completed with the scripted answer); a failed run is a
`BenchError`, never a sample.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.http_system import Api, BenchError

SAMPLE_TIMEOUT = 30.0
TERMINAL = frozenset({"run.completed", "run.error", "run.canceled"})

RESUME_KEY = "bench-system-hitl"
TTFT_KEY = "bench-system-ttft"
AGENT = "bench-approver"
PATH = "notes.md"
CONTENT = "# Notes\n\nWhat the benchmark wrote.\n"
ANSWER = "I wrote notes.md, as you approved."
TTFT_ANSWER = "Hello: this is the first token, and then some more words of the answer."

# Blueprint of the benchmark's agent: the built-in tools (`default`) and approvals (`hitl`),
# with calls to `write_file` waiting for a person.
BLUEPRINT: dict[str, Any] = {
    "name": AGENT,
    "description": "Writes notes, but only with a person's approval.",
    "prompt": "You keep notes in files. Writing a file needs a person's approval.",
    "tags": ["default", "hitl"],
    "config": {"hitl": {"tools": ["write_file"]}},
}


def resume_text(index: int | str) -> str:
    return f"{RESUME_KEY}: write the notes (thread {index})"


def ttft_text(index: int | str) -> str:
    return f"{TTFT_KEY}: say hello (run {index})"


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


async def _until_paused(events: Any, run_id: str) -> None:
    async for event in events:
        data = event.get("data") or {}
        if data.get("runId") != run_id:
            continue
        if event["type"] == "run.paused" and data.get("reason") == "hitl":
            return
        if event["type"] in TERMINAL:
            raise BenchError(f"run {run_id} ended as {event['type']} before it parked: {data}")
    raise BenchError(f"the stream ended before run {run_id} parked")


async def _until_completed(events: Any, run_id: str, answer: str) -> None:
    async for event in events:
        data = event.get("data") or {}
        if event["type"] in TERMINAL and data.get("runId") == run_id:
            if event["type"] != "run.completed" or data.get("result") != answer:
                raise BenchError(f"run {run_id} ended as {event['type']}: {data}")
            return
    raise BenchError(f"the stream ended before run {run_id} ended")


async def park(api: Api, agency: str, index: int | str) -> tuple[str, str]:
    """A fresh thread invoked until it waits on its approval (followed on its stream)."""
    thread = await api.thread(agency, AGENT)
    async with asyncio.timeout(SAMPLE_TIMEOUT), api.events(agency, thread) as events:
        run_id = await api.invoke(agency, thread, resume_text(index))
        await _until_paused(events, run_id)
    return thread, run_id


async def resume(api: Api, agency: str, thread: str, run_id: str) -> float:
    """Approve a parked run over HTTP; ms until its `run.completed` is on the thread's SSE
    stream. The stream is opened (and read up to the pause) before the clock starts."""
    stage = "was seen parked on its stream"
    try:
        async with asyncio.timeout(SAMPLE_TIMEOUT), api.events(agency, thread) as events:
            await _until_paused(events, run_id)
            started = time.perf_counter()
            stage = "completed after its approval"
            await api.approve(agency, thread, run_id)
            await _until_completed(events, run_id, ANSWER)
            return _ms(started)
    except TimeoutError:
        raise BenchError(f"run {run_id} never {stage} (waited {SAMPLE_TIMEOUT:.0f} s)") from None


async def first_token(api: Api, agency: str, index: int, model_ttft_ms: float) -> float:
    """ms from the invoke request to the first `model.delta` on the thread's SSE stream,
    less the fake model's own time to first token; the run must then complete."""
    thread = await api.thread(agency, AGENT)
    async with asyncio.timeout(SAMPLE_TIMEOUT), api.events(agency, thread) as events:
        started = time.perf_counter()
        run_id = await api.invoke(agency, thread, ttft_text(index))
        elapsed: float | None = None
        async for event in events:
            if event["type"] == "model.delta":
                elapsed = _ms(started)
                break
            if event["type"] in TERMINAL:
                raise BenchError(f"run {run_id} ended as {event['type']} before a token")
        if elapsed is None:
            raise BenchError(f"the stream ended before run {run_id} streamed a token")
        await _until_completed(events, run_id, TTFT_ANSWER)
    return elapsed - model_ttft_ms


@dataclass(frozen=True, slots=True)
class Created:
    threads: list[str]
    seconds: float
    request_ms: list[float]  # each `POST …/agents` with the first message

    @property
    def rate(self) -> float:
        return len(self.threads) / self.seconds


async def create_and_invoke(
    api: Api, agency: str, count: int, clients: int, advance: Callable[[], None]
) -> Created:
    """`count` threads created and invoked (202), each in one request (`POST …/agents` with
    its first message), by `clients` concurrent clients."""
    threads: list[str] = []
    request_ms: list[float] = []
    remaining = iter(range(count))

    async def client() -> None:
        for index in remaining:
            started = time.perf_counter()
            thread, _ = await api.started(agency, AGENT, resume_text(f"{agency}-{index}"))
            request_ms.append(_ms(started))
            threads.append(thread)
            advance()

    started = time.perf_counter()
    async with asyncio.timeout(60.0 + count * 0.5), asyncio.TaskGroup() as tg:
        for _ in range(clients):
            tg.create_task(client())
    return Created(threads, time.perf_counter() - started, request_ms)


async def until_parked(
    api: Api, agency: str, count: int, show: Callable[[int], None]
) -> tuple[float, int]:
    """Poll the agency's thread list (the read model) until `count` threads are paused;
    seconds waited and the thread count. A thread that ended or failed is a `BenchError`."""
    started = time.perf_counter()
    limit = 120.0 + count * 0.1
    try:
        async with asyncio.timeout(limit):
            while True:
                listed = await api.threads(agency)
                statuses = Counter(t["status"] for t in listed)
                show(statuses["paused"])
                broken = {s: n for s, n in statuses.items() if s in ("error", "canceled")}
                if broken:
                    raise BenchError(f"threads ended instead of parking: {broken}")
                if statuses["paused"] >= count:
                    return time.perf_counter() - started, len(listed)
                await asyncio.sleep(0.5)
    except TimeoutError:
        raise BenchError(f"{count} threads did not all park within {limit:.0f}s") from None
