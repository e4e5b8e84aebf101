"""Agent-step overhead: runs per second of a two-step tool-calling agent, ours against
LangGraph with its PostgreSQL checkpointer, in one run on the same servers.

The workload. A run is: the model calls one tool (`lookup {"word": "agent"}`), the tool
runs, the model answers with text. The model is one `FakeLLMServer(instant=True)` over real
HTTP, scripted by a key in the user's message, answering both sides; both call it through
the `openai` SDK with streaming (ours: `OpenAIProvider`; LangGraph: `ChatOpenAI(streaming=
True)`), so the model costs the same on both sides and what differs is the framework.
Embedded NATS and PostgreSQL come from `bench.common.embedded_servers()` with the project's
durable defaults (NATS `sync_interval: always`, PostgreSQL `fsync` on); PostgreSQL holds
LangGraph's checkpoints in a database of their own. Everything Python runs in this process,
on one event loop (uvloop, as `agency` runs), for both sides: the fake model's CPU counts
against both alike. The garbage collector is tuned once both sides are set up, as `agency`
tunes its long-running processes (`infra/gc_tuning.py`): it is the process's, so both
sides run with it. (The fake is started with TCP_NODELAY on its connections: see `fake_model`.)

Ours: the registry, runtime and tools services (`services.stack.run_stack`) with an
`AgentSystem` holding only the `lookup` tool, declared local (pure and fast: the runtime
runs it in its worker, as LangGraph's `ToolNode` runs it in-process, so no call reaches the
tools service), and a blueprint whose tags select it: no default middleware, whose prompts
and tools are not part of the peer's workload. A run is an `InvokeThread` command on the
bus until the thread's run terminal event is in the log. One `OrderedReader` on the
tenant's events follows the log and resolves a wait per thread, so completions cost one
subscription, not polling of the store.

LangGraph (`bench.langgraph_peer`): a `StateGraph` model → `ToolNode` → model with
`AsyncPostgresSaver` over a psycopg pool, `setup()` once; a run is `graph.ainvoke`.

Phases, after a few warm-up runs on both sides, repeated for `--rounds` rounds (medians of
the rounds reported; which side goes first alternates between rounds):
- sequential: `--runs` runs one after another, each on a fresh thread (LangGraph: a fresh
  `thread_id`), as a run per conversation is what LangGraph's checkpointer is keyed by.
- concurrent: `--threads` runs on as many threads, all started at once; the rate is the
  count over the time until the last one ended.
Our threads are created right before their phase, as a client creates a thread and then
talks to it; that is set-up, not measured (LangGraph needs none). Every measured run is
checked: ours ended in `run.completed` with the scripted answer and the tool's `tool.output`
in its thread; LangGraph's final state holds the tool's message and the same answer. A
benchmark of broken runs would mean nothing.

The LangGraph packages (`bench/requirements-langgraph.txt`) are installed into the running
interpreter on first use; they are never a project dependency.

Run: `just bench agent` (options: --runs N, --threads N, --rounds N, --skip-langgraph,
--profile FILE to write cProfile stats of our first sequential phase).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import importlib
import importlib.metadata
import pstats
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import uvloop

from agency.infra.gc_tuning import tune_gc
from agency.infra.launch.postgres_server import ensure_database
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from bench.agent_ours import our_side
from bench.agent_workload import (
    ANSWER,
    LANGGRAPH_DATABASE,
    LANGGRAPH_POOL,
    MODEL,
    PROMPT,
    SCRIPT_KEY,
    TOOL_OUTPUT,
    WARMUP_RUNS,
    WORD,
    BenchError,
    RunFn,
    phase_timeout,
    question,
)
from bench.common import Stopwatch, embedded_servers, print_load

if TYPE_CHECKING:
    from bench.langgraph_peer import LangGraphPeer

REQUIREMENTS = Path(__file__).with_name("requirements-langgraph.txt")


# --- the LangGraph packages, for the benchmark only ---------------------------------------


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in REQUIREMENTS.read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            pins[name.split("[", 1)[0].strip()] = version.strip()
    return pins


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def ensure_langgraph() -> None:
    """Install the pinned LangGraph packages into this interpreter unless they are there."""
    stale = [n for n, v in _pins().items() if _installed(n) != v]
    if not stale:
        return
    print(f"installing the LangGraph peer's packages ({', '.join(stale)})", flush=True)
    command = [sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)]
    subprocess.run(command, check=True, timeout=600)
    importlib.invalidate_caches()


# --- the fake model ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fake_model() -> AsyncIterator[FakeLLMServer]:
    """`FakeLLMServer(instant=True)`. Its socket is made with IPPROTO_TCP, so asyncio turns
    TCP_NODELAY on for every connection: without it each response's body would wait for
    the client's delayed ACK, about 40 ms per model call, drowning what is measured."""
    async with FakeLLMServer(instant=True) as server:
        yield server


# --- measuring ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sequential:
    rate: float
    p50_ms: float
    p90_ms: float


@contextlib.asynccontextmanager
async def bounded(phase: str, count: int) -> AsyncIterator[None]:
    """The whole phase within `phase_timeout(count)`; past it the benchmark fails."""
    limit = phase_timeout(count)
    try:
        async with asyncio.timeout(limit):
            yield
    except TimeoutError:
        raise BenchError(f"{count} {phase} runs did not all end within {limit:.0f}s") from None


async def sequential(run: RunFn, count: int) -> Sequential:
    latencies: list[float] = []
    async with bounded("sequential", count):
        clock = Stopwatch()
        for i in range(count):
            started = Stopwatch()
            await run(i)
            latencies.append(started.elapsed * 1000)
        elapsed = clock.elapsed
    deciles = statistics.quantiles(latencies, n=10)
    return Sequential(count / elapsed, statistics.median(latencies), deciles[8])


async def concurrent(run: RunFn, count: int) -> float:
    async with bounded("concurrent", count):
        clock = Stopwatch()
        await asyncio.gather(*(run(i) for i in range(count)))
        return count / clock.elapsed


# Prepares `count` runs of a phase (set-up, not measured): the run function, and a check of
# what the runs did once they all ended.
Prepare = Callable[[str, int], Awaitable[tuple[RunFn, Callable[[], None]]]]


@dataclass
class Results:
    sequential: list[Sequential] = field(default_factory=list)
    concurrent: list[float] = field(default_factory=list)

    def sequential_rate(self) -> float:
        return statistics.median(s.rate for s in self.sequential) if self.sequential else 0.0

    def concurrent_rate(self) -> float:
        return statistics.median(self.concurrent) if self.concurrent else 0.0

    def latency(self) -> str:
        if not self.sequential:
            return "not run"
        p50 = statistics.median(s.p50_ms for s in self.sequential)
        p90 = statistics.median(s.p90_ms for s in self.sequential)
        rounds = "/".join(f"{s.rate:.0f}" for s in self.sequential)
        return (
            f"{self.sequential_rate():,.1f} runs/s (rounds {rounds}; "
            f"p50 {p50:.1f} ms, p90 {p90:.1f} ms)"
        )

    def throughput(self) -> str:
        if not self.concurrent:
            return "not run"
        rounds = "/".join(f"{r:.0f}" for r in self.concurrent)
        return f"{self.concurrent_rate():,.1f} runs/s (rounds {rounds})"


def bench_line(metric: str, ours: float, baseline: float) -> str:
    ratio = ours / baseline if baseline else 0.0
    return f"bench: {metric} ours={ours:.1f} baseline={baseline:.1f} ratio={ratio:.3f}"


class Profiled:
    """cProfile around one phase when a file is given; writes the stats and a short top."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._profile = cProfile.Profile() if path is not None else None

    def __enter__(self) -> None:
        if self._profile is not None:
            self._profile.enable()

    def __exit__(self, *exc: object) -> None:
        if self._profile is None or self._path is None:
            return
        self._profile.disable()
        self._profile.dump_stats(self._path)
        print(f"  profile of our first sequential phase written to {self._path}; top by own time:")
        pstats.Stats(self._profile, stream=sys.stdout).sort_stats("tottime").print_stats(15)


async def measure(sides: dict[str, Prepare], args: argparse.Namespace) -> dict[str, Results]:
    """Warm-up, then per round each side's sequential phase, then each side's concurrent
    phase; the side that goes first alternates between rounds."""
    results = {name: Results() for name in sides}
    for prepare in sides.values():
        run, check = await prepare("warmup", WARMUP_RUNS)
        await sequential(run, WARMUP_RUNS)
        check()
    for round_ in range(args.rounds):
        order = list(sides.items())
        if round_ % 2:
            order.reverse()
        for name, prepare in order:
            run, check = await prepare(f"seq{round_}", args.runs)
            gc.collect()
            profiled = args.profile if name == "ours" and round_ == 0 else None
            with Profiled(profiled):
                results[name].sequential.append(await sequential(run, args.runs))
            check()
        for name, prepare in order:
            run, check = await prepare(f"conc{round_}", args.threads)
            gc.collect()
            results[name].concurrent.append(await concurrent(run, args.threads))
            check()
    return results


def langgraph_url(database_url: str) -> str:
    parts = urlsplit(database_url)
    return urlunsplit(parts._replace(path="/" + LANGGRAPH_DATABASE))


def peer_side(peer: LangGraphPeer) -> Prepare:
    async def prepare(phase: str, count: int) -> tuple[RunFn, Callable[[], None]]:
        failures: list[str] = []

        async def run(index: int) -> None:
            outcome = await peer.run(f"{phase}-{index}", question(index))
            if outcome.tool_outputs != (TOOL_OUTPUT,) or outcome.answer != ANSWER:
                failures.append(repr(outcome))

        def check() -> None:
            if failures:
                raise BenchError(
                    f"{len(failures)} LangGraph runs did not do the workload, e.g.: {failures[0]}"
                )

        return run, check

    return prepare


async def bench(args: argparse.Namespace) -> None:
    async with embedded_servers() as servers, fake_model() as fake:
        fake.script(
            SCRIPT_KEY,
            [
                ScriptStep(tool_calls=(ScriptToolCall(name="lookup", arguments={"word": WORD}),)),
                ScriptStep(content=ANSWER),
            ],
        )
        print(
            f"agent benchmark: {args.runs} sequential runs, {args.threads} concurrent, "
            f"{args.rounds} round(s), medians; nats sync_interval={servers.sync_interval}, "
            "postgres fsync=on",
            flush=True,
        )
        print(
            f"  workload: the model calls lookup {{'word': {WORD!r}}}, the tool answers, the "
            "model answers; the fake model is instant and streams over HTTP",
            flush=True,
        )
        async with contextlib.AsyncExitStack() as resources:
            ours = await resources.enter_async_context(
                our_side(servers.nats_url, servers.database_url, fake.base_url)
            )
            sides: dict[str, Prepare] = {"ours": ours.prepare}
            peer: LangGraphPeer | None = None
            if not args.skip_langgraph:
                # Imported only now: its packages are the benchmark's, installed on demand.
                from bench import langgraph_peer

                await ensure_database(servers.database_url, LANGGRAPH_DATABASE)
                peer = await resources.enter_async_context(
                    langgraph_peer.LangGraphPeer(
                        langgraph_url(servers.database_url),
                        fake.base_url,
                        model=MODEL,
                        prompt=PROMPT,
                        pool_size=LANGGRAPH_POOL,
                    )
                )
                sides["langgraph"] = peer_side(peer)
            # Both sides run in this process, so both get the collector `agency` runs with.
            tune_gc()
            results = await measure(sides, args)
            mine, theirs = results["ours"], results.get("langgraph", Results())

            print(
                "  ours: registry, runtime and tools services in this process, a fresh thread "
                f"per run, {ours.events_per_run} events per run",
                flush=True,
            )
            if peer is not None:
                total_runs = WARMUP_RUNS + args.rounds * (args.runs + args.threads)
                per_run = await peer.checkpoints() / total_runs
                print(
                    f"  langgraph {importlib.metadata.version('langgraph')}: model → ToolNode → "
                    f"model, ChatOpenAI streaming, AsyncPostgresSaver (pool of {LANGGRAPH_POOL}), "
                    f"a fresh thread_id per run, {per_run:.0f} checkpoints per run",
                    flush=True,
                )
            print(f"  sequential: ours {mine.latency()}; langgraph {theirs.latency()}", flush=True)
            print(
                f"  concurrent ({args.threads} threads): ours {mine.throughput()}; "
                f"langgraph {theirs.throughput()}",
                flush=True,
            )
    print(bench_line("sequential", mine.sequential_rate(), theirs.sequential_rate()), flush=True)
    print(bench_line("concurrent", mine.concurrent_rate(), theirs.concurrent_rate()), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="just bench agent")
    parser.add_argument("--runs", type=int, default=100, help="sequential runs per round")
    parser.add_argument("--threads", type=int, default=200, help="concurrent runs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument(
        "--skip-langgraph", action="store_true", help="measure ours only (baseline 0)"
    )
    parser.add_argument(
        "--profile", type=Path, help="write cProfile stats of our first sequential phase here"
    )
    args = parser.parse_args()
    if args.runs < 2 or args.threads < 1 or args.rounds < 1:
        parser.error("--runs needs at least 2, --threads and --rounds at least 1")
    if not args.skip_langgraph:
        ensure_langgraph()
    failures: list[BaseException] = []
    print_load("before")
    try:
        uvloop.run(bench(args))
    except* BenchError as group:
        failures.extend(_leaves(group))
    print_load("after")
    if failures:
        sys.exit(f"agent benchmark failed: {failures[0]}")


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


if __name__ == "__main__":
    main()
