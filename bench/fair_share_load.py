"""Two tenants' loads over HTTP for the fair-share benchmark and test.

- `calm`: tenant A's usual load. Each of its runs is a new thread, an invoke and the run
  followed on the thread's SSE stream until it ends; what every request answered, each run's
  end and its time from the invoke to its end are kept.
- `flood`: tenant B as hard as it can, for a given time, `python -m bench.fair_share_load`
  in a process of its own (one JSON line on stdout): invokes, thread creates (REST and
  LangGraph), invokes with messages near the size limit, and SSE streams opened and held.
  Every answer is counted by kind and status, and every 429 is checked for a `Retry-After`
  that says the seconds its message says.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import msgspec
from httpx_sse import aconnect_sse

TERMINAL = frozenset({"run.completed", "run.error", "run.canceled"})
RUN_TIMEOUT = 120.0
AGENT = "fair"
BLUEPRINT = {"name": AGENT, "prompt": "You answer in one sentence.", "tags": []}
# Under the invoke's default size limit (256 KB), so the door does not refuse it for that.
BIG_MESSAGE = "x" * 200_000
_RETRY_IN = re.compile(r"retry in (\d+) s")


class CalmSummary(msgspec.Struct, kw_only=True):
    """A's load: `statuses` of every request by `METHOD kind status`; `failed`: runs that
    did not complete (how they ended); `latencies_ms`: invoke to run end, per run;
    `answers_ms`: invoke to its answer (202), per run."""

    statuses: dict[str, int]
    failed: list[str]
    latencies_ms: list[float]
    answers_ms: list[float] = msgspec.field(default_factory=list)

    def p95(self, latencies: list[float] | None = None) -> float:
        ordered = sorted(self.latencies_ms if latencies is None else latencies)
        return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else 0.0

    def count(self, status: int) -> int:
        return sum(n for key, n in self.statuses.items() if key.endswith(f" {status}"))


class FloodSummary(msgspec.Struct, kw_only=True):
    """B's flood: answers by `kind status`; 429s without a `Retry-After` or whose message
    says other seconds (`retry_after_wrong`, with examples); streams opened and refused."""

    statuses: dict[str, int]
    retry_after_wrong: int
    examples: list[str]
    streams_open: int

    def count(self, status: int) -> int:
        return sum(n for key, n in self.statuses.items() if key.endswith(f" {status}"))


def client(url: str, key: str, connections: int = 64) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": f"Bearer {key}", "x-api-key": key},
        timeout=httpx.Timeout(60.0),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


async def prepare(http: httpx.AsyncClient) -> str:
    """The tenant's agency with the benchmark's blueprint; its id."""
    r = await http.post("/agencies", json={"name": "fair"})
    r.raise_for_status()
    agency = str(r.json()["id"])
    r = await http.post(f"/agency/{agency}/blueprints", json=BLUEPRINT)
    r.raise_for_status()
    return agency


# --- A ---------------------------------------------------------------------------------------


async def calm(http: httpx.AsyncClient, agency: str, runs: int, concurrency: int) -> CalmSummary:
    statuses: Counter[str] = Counter()
    failed: list[str] = []
    latencies: list[float] = []
    answers: list[float] = []
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            try:
                ended, ms = await _calm_run(http, agency, index, statuses, answers)
            except (httpx.HTTPError, TimeoutError) as e:
                failed.append(f"run {index}: {type(e).__name__}: {e}")
                return
            if ended == "run.completed":
                latencies.append(ms)
            else:
                failed.append(f"run {index}: {ended}")

    await asyncio.gather(*(one(i) for i in range(runs)))
    return CalmSummary(
        statuses=dict(statuses), failed=failed, latencies_ms=latencies, answers_ms=answers
    )


async def _calm_run(
    http: httpx.AsyncClient,
    agency: str,
    index: int,
    statuses: Counter[str],
    answers: list[float] | None = None,
) -> tuple[str, float]:
    r = await http.post(f"/agency/{agency}/agents", json={"agentType": AGENT})
    statuses[f"POST thread {r.status_code}"] += 1
    if r.status_code != 201:
        return f"thread create answered {r.status_code}: {r.text[:200]}", 0.0
    thread = str(r.json()["id"])
    path = f"/agency/{agency}/agent/{thread}"
    async with (
        asyncio.timeout(RUN_TIMEOUT),
        aconnect_sse(http, "GET", f"{path}/stream", timeout=httpx.Timeout(60, read=None)) as sse,
    ):
        statuses[f"GET stream {sse.response.status_code}"] += 1
        if sse.response.status_code != 200:
            return f"stream answered {sse.response.status_code}", 0.0
        started = time.perf_counter()
        body = {"messages": [{"role": "user", "content": f"calm run {index}"}]}
        r = await http.post(f"{path}/invoke", json=body)
        if answers is not None:
            answers.append((time.perf_counter() - started) * 1000)
        statuses[f"POST invoke {r.status_code}"] += 1
        if r.status_code != 202:
            return f"invoke answered {r.status_code}: {r.text[:200]}", 0.0
        run_id = r.json()["runId"]
        async for frame in sse.aiter_sse():
            if frame.event != "message" or not frame.data:
                continue
            event = json.loads(frame.data)
            data = event.get("data") or {}
            if event.get("type") in TERMINAL and data.get("runId") == run_id:
                return str(event["type"]), (time.perf_counter() - started) * 1000
    return "the stream ended before the run did", 0.0


# --- B ---------------------------------------------------------------------------------------


class _Flood:
    def __init__(self, http: httpx.AsyncClient, agency: str, big: int = 1) -> None:
        self.http = http
        self.agency = agency
        # Of every eight requests, two thread creates, `big` big invokes, the rest small.
        self.big = big
        self.statuses: Counter[str] = Counter()
        self.retry_after_wrong = 0
        self.examples: list[str] = []
        self.threads: list[str] = []
        self.creates = 0
        self.streams_open = 0

    def answered(self, kind: str, r: httpx.Response) -> None:
        self.statuses[f"{kind} {r.status_code}"] += 1
        if r.status_code == 429:
            said = _RETRY_IN.search(r.text)
            header = r.headers.get("retry-after")
            if header is None or (said is not None and said.group(1) != header):
                self.retry_after_wrong += 1
                if len(self.examples) < 5:
                    self.examples.append(f"{kind}: Retry-After {header!r}: {r.text[:300]}")
        elif r.status_code >= 500 and len(self.examples) < 5:
            self.examples.append(f"{kind}: {r.status_code}: {r.text[:300]}")

    async def thread(self) -> None:
        """A thread over REST, or every other time over LangGraph (in its own agency:
        invoked no further)."""
        self.creates += 1
        if self.creates % 2:
            r = await self.http.post("/langgraph/threads", json={})
            self.answered("POST langgraph thread", r)
            return
        r = await self.http.post(f"/agency/{self.agency}/agents", json={"agentType": AGENT})
        self.answered("POST thread", r)
        if r.status_code == 201:
            self.threads.append(str(r.json()["id"]))

    async def invoke(self, n: int, big: bool) -> None:
        if not self.threads:
            await self.thread()
            return
        thread = self.threads[n % len(self.threads)]
        text = BIG_MESSAGE if big else f"flood {n}"
        body = {"messages": [{"role": "user", "content": text}]}
        r = await self.http.post(f"/agency/{self.agency}/agent/{thread}/invoke", json=body)
        self.answered("POST big invoke" if big else "POST invoke", r)

    async def stream(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and not self.threads:
            await self.thread()
        thread = self.threads[0] if self.threads else ""
        path = f"/agency/{self.agency}/agent/{thread}/stream"
        with contextlib.suppress(httpx.HTTPError):
            async with self.http.stream(
                "GET", path, timeout=httpx.Timeout(60, read=None)
            ) as response:
                self.statuses[f"GET stream {response.status_code}"] += 1
                if response.status_code != 200:
                    await response.aread()
                    self.answered("GET stream (read)", response)
                    return
                self.streams_open += 1
                await stop.wait()

    async def worker(self, index: int, stop: asyncio.Event) -> None:
        n = index
        while not stop.is_set():
            n += 1
            try:
                slot = n % 8
                if slot < 2:
                    await self.thread()
                else:
                    await self.invoke(n, big=slot < 2 + self.big)
            except httpx.HTTPError as e:
                self.statuses[f"error {type(e).__name__}"] += 1


async def flood(
    url: str, key: str, agency: str, seconds: float, workers: int, streams: int, big: int = 1
) -> FloodSummary:
    async with client(url, key, connections=workers + streams) as http:
        load = _Flood(http, agency, big)
        stop = asyncio.Event()
        tasks = [asyncio.create_task(load.worker(i, stop)) for i in range(workers)]
        tasks += [asyncio.create_task(load.stream(stop)) for _ in range(streams)]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=seconds)  # the flood's duration
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=90)
    return FloodSummary(
        statuses=dict(load.statuses),
        retry_after_wrong=load.retry_after_wrong,
        examples=load.examples,
        streams_open=load.streams_open,
    )


@contextlib.asynccontextmanager
async def flooding(
    url: str,
    key: str,
    agency: str,
    seconds: float,
    workers: int = 48,
    streams: int = 24,
    big: int = 1,
) -> AsyncIterator[asyncio.Future[FloodSummary]]:
    """B's flood in a process of its own; the future is its summary once it has ended."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.fair_share_load", "--url", url, "--key", key,
        "--agency", agency, "--seconds", str(seconds), "--workers", str(workers),
        "--streams", str(streams), "--big", str(big),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip

    async def summary() -> FloodSummary:
        out, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"the flood exited {process.returncode}: {err.decode()[-2000:]}")
        return msgspec.json.decode(out.splitlines()[-1], type=FloodSummary)

    done = asyncio.ensure_future(asyncio.wait_for(summary(), timeout=seconds + 120))
    try:
        yield done
    finally:
        if not done.done():
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            with contextlib.suppress(BaseException):
                await done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Tenant B's flood (one JSON line).")
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--agency", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=48)
    parser.add_argument("--streams", type=int, default=24)
    parser.add_argument("--big", type=int, default=1, help="big invokes of every eight, 0-6")
    args = parser.parse_args(argv)
    summary = asyncio.run(
        flood(args.url, args.key, args.agency, args.seconds, args.workers, args.streams, args.big)
    )
    sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")


if __name__ == "__main__":
    main()
