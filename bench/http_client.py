"""The client side of `just bench http`: one `langgraph-sdk` script, run as is against any
LangGraph Agent Server (our `/langgraph` routes, Aegra).

Each measurement checks what it measured: a run completed with the scripted answer, a run
parked at its interrupt, a resume ended with the answer after the tool. A failed run is a
`BenchError`, never a sample; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph_sdk import get_client

from bench.http_system import BenchError

SAMPLE_TIMEOUT = 60.0
ANSWER_KEY = "bench-http-answer"
RESUME_KEY = "bench-http-hitl"
TTFT_KEY = "bench-http-ttft"
PATH = "notes.md"
CONTENT = "# Notes\n\nWhat the benchmark wrote.\n"
ANSWER = "Here is the answer you asked for."
RESUMED = "I wrote notes.md, as you approved."
TTFT_ANSWER = "Hello: this is the first token, and then some more words of the answer."


@dataclass(frozen=True, slots=True)
class Target:
    """A server the script drives: its LangGraph URL, key, headers and assistant."""

    name: str
    url: str
    assistant: str
    api_key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Counts:
    sequential: int
    concurrent: int
    creates: int
    resumes: int
    ttfts: int
    warmup: int
    model_ttft_ms: float


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _last_text(values: Any) -> str:
    messages = values.get("messages") if isinstance(values, dict) else None
    if not messages:
        return ""
    last = messages[-1]
    return str(last.get("content", "")) if last.get("type") == "ai" else ""


def _interrupted(values: Any) -> bool:
    return isinstance(values, dict) and bool(values.get("__interrupt__"))


def _text_of(data: Any) -> str:
    """The text of a `messages` part: `[message, …]` (partial/complete) or `[chunk, meta]`."""
    if isinstance(data, list) and data and isinstance(data[0], dict):
        content = data[0].get("content")
        return content if isinstance(content, str) else ""
    return ""


class Driver:
    """The measurements, over one SDK client."""

    def __init__(self, target: Target, counts: Counts) -> None:
        self.target = target
        self.counts = counts
        self.client = get_client(
            url=target.url, api_key=target.api_key, headers=target.headers, timeout=SAMPLE_TIMEOUT
        )
        self.serial = f"{target.name}-{time.time_ns()}"

    async def close(self) -> None:
        await self.client.http.client.aclose()

    async def thread(self) -> str:
        created = await self.client.threads.create(graph_id=self.target.assistant)
        return str(created["thread_id"])

    async def answer(self, thread: str, index: int | str) -> None:
        """One run on `thread` until it completes with the scripted answer."""
        text = f"{ANSWER_KEY}: answer me ({self.serial} {index})"
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            values = await self.client.runs.wait(thread, self.target.assistant, input=_ask(text))
        if _interrupted(values) or _last_text(values) != ANSWER:
            raise BenchError(f"{self.target.name}: run {index} did not complete: {values!r:.300}")

    async def park(self, thread: str, index: int | str) -> None:
        text = f"{RESUME_KEY}: write the notes ({self.serial} {index})"
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            values = await self.client.runs.wait(thread, self.target.assistant, input=_ask(text))
        if not _interrupted(values):
            raise BenchError(f"{self.target.name}: run {index} did not park: {values!r:.300}")

    async def resume(self, thread: str, index: int | str) -> float:
        """Approve the parked call; ms until the run ended with the answer."""
        started = time.perf_counter()
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            values = await self.client.runs.wait(
                thread, self.target.assistant, command={"resume": {"approved": True}}
            )
        elapsed = _ms(started)
        if _interrupted(values) or _last_text(values) != RESUMED:
            raise BenchError(f"{self.target.name}: resume {index} did not end: {values!r:.300}")
        return elapsed

    async def first_token(self, thread: str, index: int | str) -> float:
        """`stream_mode="messages"`: ms to the first text, less the model's own; the stream
        must then end with the whole answer."""
        text = f"{TTFT_KEY}: say hello ({self.serial} {index})"
        first: float | None = None
        final = ""
        started = time.perf_counter()
        async with asyncio.timeout(SAMPLE_TIMEOUT):
            stream = self.client.runs.stream(
                thread, self.target.assistant, input=_ask(text), stream_mode="messages"
            )
            async for part in stream:
                if part.event == "error":
                    raise BenchError(f"{self.target.name}: ttft run {index}: {part.data!r:.300}")
                if not part.event.startswith("messages"):
                    continue
                content = _text_of(part.data)
                if first is None and content:
                    first = _ms(started)
                if content:
                    final = content
        if first is None or final != TTFT_ANSWER:
            raise BenchError(f"{self.target.name}: ttft run {index} streamed {final!r:.200}")
        return first - self.counts.model_ttft_ms

    # --- the phases ----------------------------------------------------------------------

    async def latencies(self, phase: str) -> list[float]:
        """The ms samples of a latency phase: create, sequential, resume or ttft."""
        phases = {
            "create": self.creates,
            "sequential": self.sequential,
            "resume": self.resumes,
            "ttft": self.ttfts,
        }
        return await phases[phase]()

    async def sequential(self) -> list[float]:
        """Runs one after the other, each on a thread created before: ms per run."""
        out: list[float] = []
        for i in range(-self.counts.warmup, self.counts.sequential):
            thread = await self.thread()
            started = time.perf_counter()
            await self.answer(thread, f"seq-{i}")
            if i >= 0:
                out.append(_ms(started))
        return out

    async def concurrent(self) -> float:
        """`concurrent` runs at once, each on its own thread: runs per second."""
        threads = [await self.thread() for _ in range(self.counts.concurrent)]
        started = time.perf_counter()
        async with asyncio.timeout(SAMPLE_TIMEOUT * 2), asyncio.TaskGroup() as tg:
            for i, thread in enumerate(threads):
                tg.create_task(self.answer(thread, f"conc-{i}"))
        return len(threads) / (time.perf_counter() - started)

    async def creates(self) -> list[float]:
        out: list[float] = []
        for i in range(-self.counts.warmup, self.counts.creates):
            started = time.perf_counter()
            async with asyncio.timeout(SAMPLE_TIMEOUT):
                await self.thread()
            if i >= 0:
                out.append(_ms(started))
        return out

    async def resumes(self) -> list[float]:
        out: list[float] = []
        for i in range(-self.counts.warmup, self.counts.resumes):
            thread = await self.thread()
            await self.park(thread, f"resume-{i}")
            elapsed = await self.resume(thread, f"resume-{i}")
            if i >= 0:
                out.append(elapsed)
        return out

    async def ttfts(self) -> list[float]:
        out: list[float] = []
        for i in range(-self.counts.warmup, self.counts.ttfts):
            thread = await self.thread()
            elapsed = await self.first_token(thread, f"ttft-{i}")
            if i >= 0:
                out.append(elapsed)
        return out


async def measure(targets: Sequence[Target], counts: Counts) -> dict[str, dict[str, float]]:
    """Every phase against every target, the targets taking each phase in turn (the first
    goes first in one phase, last in the next), so that both see the machine as it is in
    the same minutes: per target, p50 ms for latencies and runs/s for `concurrent`."""
    drivers = [Driver(target, counts) for target in targets]
    results: dict[str, dict[str, float]] = {target.name: {} for target in targets}
    try:
        for turn, name in enumerate(("create", "sequential", "resume", "ttft", "concurrent")):
            for driver in drivers if turn % 2 == 0 else drivers[::-1]:
                into = results[driver.target.name]
                if name == "concurrent":
                    into[name] = await driver.concurrent()
                    print(f"  {driver.target.name} concurrent: {counts.concurrent} runs at "
                          f"once, {into[name]:.1f} runs/s", flush=True)  # fmt: skip
                    continue
                samples = await driver.latencies(name)
                into[name] = statistics.median(samples)
                print(f"  {driver.target.name} {name}: {spread(samples)}", flush=True)
    finally:
        for driver in drivers:
            await driver.close()
    return results


def spread(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return (
        f"p50 {statistics.median(samples):.1f} ms, p90 {p90:.1f} ms, "
        f"max {max(samples):.1f} ms over {len(samples)}"
    )
