"""The whole system as a user sees it, over HTTP: `agency up` in a subprocess against
LangGraph in-process, on the same fake model and the same PostgreSQL server.

The workload. One agent (`bench-approver`, saved over HTTP): the built-in tools (`default`
tag) and approvals (`hitl`), with `config.hitl.tools = ["write_file"]`. The model (a
`FakeLLMServer(instant=True)` run by this process, scripted by a key in the user's message)
calls `write_file`; the run parks until a person approves; the tool runs; the model answers
with text and the run completes. `agency up --data-dir <tmp> --port 0` runs every service,
NATS and PostgreSQL with their durable defaults, its model pointed at the fake
(`OPENAI_BASE_URL`), with the per-tenant invoke limits off (`AGENCY_TENANT_MAX_ACTIVE_RUNS=0`,
`AGENCY_TENANT_INVOKES_PER_SECOND=0`: one tenant holds every thread of the benchmark). The
clients are httpx (one pool) and httpx-sse in this process.

LangGraph (`bench.langgraph_hitl`): model → `ToolNode` → model, `write_file` asking for
approval with `interrupt()`, `AsyncPostgresSaver` (pool of 20) in a database of its own on
the system's PostgreSQL server; a run is `ainvoke` on a fresh `thread_id`, a resume
`ainvoke(Command(resume=...))` on it. It runs in this process after our phases, while
`agency up` is idle.

Lines (`bench: <name> ours=… baseline=… ratio=…`). For latencies the ratio is
baseline/ours, for rates and memory ours/baseline: above 1 means we are faster for
`resume`, `parked-resume`, `ttft` and `create`; for `parked` it is how many times the
start-up memory the parked threads take.
- `resume`: a thread parked on its approval; `POST …/approve`, until `run.completed` is on
  the thread's SSE stream (opened and read up to the pause before the clock starts): the
  tool and one model call in between. p50 ms over `--runs` threads after 5 warm-up ones
  (p90 and max printed too). LangGraph: `Command(resume=...)` until the graph ends, p50.
- `ttft`: `POST …/invoke` until the first `model.delta` is on the thread's SSE stream
  (opened before), less the fake's own time to first token (`--model-ttft-ms`, 50 ms: the
  scripted delay before its first chunk); p50 over `--runs` runs, each of which must then
  complete. LangGraph: `astream(stream_mode="messages")` until the first text chunk, same
  subtraction.
- `create`: `--threads` threads created (`POST …/agents`) and invoked (`POST …/invoke`,
  202) by `--clients` concurrent clients; threads per second. How long until all are
  parked (the thread list says `paused`) is printed too. LangGraph: as many concurrent
  tasks, each running a fresh `thread_id` until its first interrupt (the same work: a thread
  started and parked at its approval); threads per second.
- `parked`: `--parked` more threads created and invoked the same way, until the thread list
  shows every one `paused`; the resident memory of `agency up` and its nats-server and
  PostgreSQL processes: their PSS (proportional set size) summed over the process tree,
  which counts each resident page once, split between the processes that share it. (Their
  RSS summed, printed too, counts PostgreSQL's shared buffers once per backend: with 35
  processes it reads several times the memory the machine gives them.) Baseline: the same
  measurement right after start-up.
  Printed too: the tree's CPU use with no requests (`--idle-window` seconds), after
  start-up and with the threads parked, and the p50/p90/max of each create and invoke
  request.
- `parked-resume`: `resume` for 20 random threads among those parked; baseline: the
  `resume` p50 measured before (so the ratio shows what parking costs a resume).

Every measured run is checked: it parked on `run.paused` (reason `hitl`), completed with
the scripted answer; LangGraph's parked at an interrupt and ended with the tool's message
and the answer. Every wait has a deadline.

Run: `just bench system` (options: --runs N, --threads N, --parked N, --clients N,
--model-ttft-ms MS, --idle-window S, --skip-langgraph). Figures: `docs/performance.md`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import uvloop

from bench.agent import ensure_langgraph
from bench.common import print_load
from bench.http_system import (
    Api,
    BenchError,
    Memory,
    RunningSystem,
    busy,
    memory_by_kind,
    memory_of,
)
from bench.system_ours import (
    ANSWER,
    BLUEPRINT,
    CONTENT,
    PATH,
    RESUME_KEY,
    TTFT_ANSWER,
    TTFT_KEY,
    create_and_invoke,
    first_token,
    park,
    resume,
    resume_text,
    ttft_text,
    until_parked,
)
from infra.launch.postgres_server import ensure_database
from services.llm.fake_scripts import ScriptStep, ScriptToolCall
from services.llm.fake_server import FakeLLMServer

WARMUP = 5
TOKEN_MS = 20
PARKED_RESUMES = 20
LANGGRAPH_DATABASE = "langgraph_system_bench"
MODEL = "fake-model"
LIMITS_OFF = {"AGENCY_TENANT_MAX_ACTIVE_RUNS": "0", "AGENCY_TENANT_INVOKES_PER_SECOND": "0"}


def bench_line(metric: str, ours: float, baseline: float, ratio: float) -> str:
    return f"bench: {metric} ours={ours:.1f} baseline={baseline:.1f} ratio={ratio:.3f}"


def latency_line(metric: str, ours: float, baseline: float) -> str:
    """Latencies: ratio baseline/ours, above 1 when ours is faster."""
    return bench_line(metric, ours, baseline, baseline / ours if ours else 0.0)


def rate_line(metric: str, ours: float, baseline: float) -> str:
    return bench_line(metric, ours, baseline, ours / baseline if baseline else 0.0)


def spread(samples: list[float]) -> str:
    p90 = (
        statistics.quantiles(samples, n=10, method="inclusive")[8]
        if len(samples) > 1
        else samples[0]
    )
    return (
        f"p50 {statistics.median(samples):.1f} ms, p90 {p90:.1f} ms, "
        f"max {max(samples):.1f} ms over {len(samples)}"
    )


def say(text: str) -> None:
    print(f"  {text}", flush=True)


@contextmanager
def progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar (rich, if installed) that the caller sets to a count."""
    try:
        from rich.progress import Progress
    except ImportError:
        yield lambda done: None
        return
    if not sys.stdout.isatty():
        yield lambda done: None
        return
    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


def script(fake: FakeLLMServer, model_ttft_ms: int) -> None:
    call = ScriptToolCall(name="write_file", arguments={"path": PATH, "content": CONTENT})
    fake.script(RESUME_KEY, [ScriptStep(tool_calls=(call,)), ScriptStep(content=ANSWER)])
    # Paced like a real model's tokens: our provider hands the first text on at once and
    # the rest every 50 ms (`ModelSettings.coalesce_ms`); an answer received whole with
    # its first text is not streamed at all (`model.completed` carries it).
    step = ScriptStep(content=TTFT_ANSWER, delay_ms=model_ttft_ms, stream_delay_ms=TOKEN_MS)
    fake.script(TTFT_KEY, [step])


async def samples(count: int, measure: Callable[[int], Awaitable[float]]) -> list[float]:
    for i in range(WARMUP):
        await measure(-1 - i)
    return [await measure(i) for i in range(count)]


# --- ours ------------------------------------------------------------------------------------


async def ours(
    args: argparse.Namespace, system: RunningSystem, api: Api, results: dict[str, float]
) -> None:
    agency = await api.agency("bench")
    await api.blueprint(agency, BLUEPRINT)
    start = memory_of(system.pid)
    idle = await busy(system.pid, args.idle_window)
    say(f"after start-up: {start.rss_mb:,.0f} MB RSS ({start.pss_mb:,.0f} MB PSS) "
        f"over {start.processes} processes; {idle:.2f} cores busy while idle")  # fmt: skip
    say(f"after start-up, PSS by process: {by_kind(system.pid)}")

    async def one_resume(i: int) -> float:
        thread, run_id = await park(api, agency, f"resume-{i}")
        return await resume(api, agency, thread, run_id)

    resumes = await samples(args.runs, one_resume)
    say(f"resume: {spread(resumes)}")
    results["resume"] = statistics.median(resumes)

    ttfts = await samples(args.runs, lambda i: first_token(api, agency, i, args.model_ttft_ms))
    say(f"ttft: {spread(ttfts)} (less the fake's {args.model_ttft_ms} ms; the first text is "
        "handed on at once, the rest in 50 ms windows)")  # fmt: skip
    results["ttft"] = statistics.median(ttfts)

    created_agency = await api.agency("bench-create")
    await api.blueprint(created_agency, BLUEPRINT)
    created = await fill(api, created_agency, args.threads, args.clients, "create")
    results["create"] = created

    parked_agency = await api.agency("bench-parked")
    await api.blueprint(parked_agency, BLUEPRINT)
    await fill(api, parked_agency, args.parked, args.clients, "parked")
    held = memory_of(system.pid)
    total = 2 * (args.runs + WARMUP) + args.threads + args.parked
    each = per_thread(held, start, args.parked)
    say(f"{args.parked:,} threads parked ({total:,} threads in the system): "
        f"{held.rss_mb:,.0f} MB RSS ({held.pss_mb:,.0f} MB PSS) over {held.processes} "
        f"processes; {each:.1f} KB PSS more per parked thread than at start-up")  # fmt: skip
    say(f"parked, PSS by process: {by_kind(system.pid)}")
    results["parked"], results["parked-start"] = held.pss_mb, start.pss_mb
    idle = await busy(system.pid, args.idle_window)
    say(f"with them parked and no requests: {idle:.2f} cores busy over {args.idle_window:g} s")

    listed = await api.threads(parked_agency)
    chosen = random.sample(listed, min(PARKED_RESUMES, len(listed)))
    late: list[float] = []
    for thread in chosen:
        late.append(await resume(api, parked_agency, thread["id"], thread["currentRunId"]))
    say(f"parked-resume: {spread(late)}")
    results["parked-resume"] = statistics.median(late)


def by_kind(pid: int) -> str:
    kinds = sorted(memory_by_kind(pid).items(), key=lambda kv: -kv[1])
    return ", ".join(f"{kind} {mb:,.0f} MB" for kind, mb in kinds)


def per_thread(held: Memory, start: Memory, count: int) -> float:
    return (held.pss_mb - start.pss_mb) * 1024 / count if count else 0.0


async def fill(api: Api, agency: str, count: int, clients: int, label: str) -> float:
    """`count` threads created and invoked at `clients` concurrency, until all are parked;
    the create-and-invoke rate."""
    with progress(f"{label}: creating and invoking", count) as show:
        done = 0

        def advance() -> None:
            nonlocal done
            done += 1
            show(done)

        created = await create_and_invoke(api, agency, count, clients, advance)
    with progress(f"{label}: waiting until parked", count) as show:
        waited, listed = await until_parked(api, agency, count, show)
    if listed != count:
        raise BenchError(f"{label}: {listed} threads listed, {count} created")
    say(f"{label}: POST …/agents {spread(created.create_ms)}; POST …/invoke "
        f"{spread(created.invoke_ms)}")  # fmt: skip
    to_parked = count / (created.seconds + waited)
    say(f"{label}: {count:,} threads created and invoked by {clients} clients in "
        f"{created.seconds:.1f} s ({created.rate:,.1f}/s); all parked {waited:.1f} s "
        f"later ({to_parked:,.1f} threads/s to parked)")  # fmt: skip
    return float(created.rate)


# --- LangGraph -------------------------------------------------------------------------------


async def langgraph(
    args: argparse.Namespace, database_url: str, model_url: str, results: dict[str, float]
) -> None:
    from bench.langgraph_hitl import HitlPeer  # its packages are the benchmark's

    await ensure_database(database_url, LANGGRAPH_DATABASE)
    url = urlunsplit(urlsplit(database_url)._replace(path="/" + LANGGRAPH_DATABASE))
    async with HitlPeer(url, model_url, model=MODEL) as peer:
        prefix = f"lg-{time.time_ns()}"

        async def one_resume(i: int) -> float:
            thread = f"{prefix}-resume-{i}"
            if not await peer.start(thread, resume_text(thread)):
                raise BenchError(f"LangGraph thread {thread} did not park at its interrupt")
            started = time.perf_counter()
            answer = await peer.resume(thread)
            elapsed = (time.perf_counter() - started) * 1000
            if answer != ANSWER:
                raise BenchError(f"LangGraph thread {thread} did not complete: {answer!r}")
            return elapsed

        async with asyncio.timeout(60 + args.runs):
            resumes = await samples(args.runs, one_resume)
        say(f"langgraph resume: {spread(resumes)}")
        results["lg-resume"] = statistics.median(resumes)

        model_ttft_ms: float = args.model_ttft_ms

        async def one_ttft(i: int) -> float:
            thread = f"{prefix}-ttft-{i}"
            started = time.perf_counter()
            if not await peer.first_token(thread, ttft_text(thread)):
                raise BenchError(f"LangGraph thread {thread} streamed no token")
            return (time.perf_counter() - started) * 1000 - model_ttft_ms

        async with asyncio.timeout(60 + args.runs):
            ttfts = await samples(args.runs, one_ttft)
        say(f"langgraph ttft: {spread(ttfts)} (less the fake's {args.model_ttft_ms} ms)")
        results["lg-ttft"] = statistics.median(ttfts)

        remaining = iter(range(args.threads))
        parked: list[bool] = []

        async def client() -> None:
            for i in remaining:
                parked.append(await peer.start(f"{prefix}-create-{i}", resume_text(i)))

        started = time.perf_counter()
        async with asyncio.timeout(60 + args.threads * 0.5), asyncio.TaskGroup() as tg:
            for _ in range(args.clients):
                tg.create_task(client())
        elapsed = time.perf_counter() - started
        if not all(parked) or len(parked) != args.threads:
            raise BenchError(f"{parked.count(False)} LangGraph threads did not park")
        results["lg-create"] = args.threads / elapsed
        say(f"langgraph create: {args.threads:,} threads parked by {args.clients} tasks in "
            f"{elapsed:.1f} s ({results['lg-create']:,.1f}/s)")  # fmt: skip


# --- the run ---------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> dict[str, float]:
    results: dict[str, float] = {}
    async with FakeLLMServer(instant=True) as fake:
        script(fake, args.model_ttft_ms)
        print(
            f"system benchmark: agency up over HTTP; {args.runs} resumes and ttft runs, "
            f"{args.threads:,} created by {args.clients} clients, {args.parked:,} parked",
            flush=True,
        )
        async with RunningSystem(fake.base_url, LIMITS_OFF) as system:
            assert system.endpoints is not None
            async with Api(system.endpoints, connections=args.clients * 2 + 4) as api:
                try:
                    await ours(args, system, api, results)
                except BaseException:
                    print(system.log_tail(), file=sys.stderr, flush=True)
                    raise
            if not args.skip_langgraph:
                await langgraph(args, system.endpoints.database_url, fake.base_url, results)
    return results


def report(results: dict[str, float]) -> None:
    get = results.get
    print(latency_line("resume", results["resume"], get("lg-resume", 0.0)), flush=True)
    print(rate_line("create", results["create"], get("lg-create", 0.0)), flush=True)
    print(rate_line("parked", results["parked"], results["parked-start"]), flush=True)
    print(latency_line("parked-resume", results["parked-resume"], results["resume"]), flush=True)
    print(latency_line("ttft", results["ttft"], get("lg-ttft", 0.0)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="just bench system")
    parser.add_argument("--runs", type=int, default=20, help="resumes and ttft runs measured")
    parser.add_argument("--threads", type=int, default=1000, help="threads created (create)")
    parser.add_argument("--parked", type=int, default=10_000, help="threads parked (parked)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients")
    parser.add_argument(
        "--model-ttft-ms", type=int, default=50, help="the fake model's time to first token"
    )
    parser.add_argument(
        "--idle-window", type=float, default=10.0, help="seconds the idle CPU is measured over"
    )
    parser.add_argument(
        "--skip-langgraph", action="store_true", help="measure ours only (baseline 0)"
    )
    args = parser.parse_args()
    if args.runs < 2 or args.threads < 1 or args.parked < 1 or args.clients < 1:
        parser.error("--runs needs at least 2; --threads, --parked and --clients at least 1")
    if not args.skip_langgraph:
        ensure_langgraph()
    print_load("before")
    try:
        results = uvloop.run(bench(args))
    except* BenchError as group:
        sys.exit(f"system benchmark failed: {_first(group)}")
    print_load("after")
    report(results)


def _first(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


if __name__ == "__main__":
    main()
