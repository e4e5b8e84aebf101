"""The whole system as a user sees it, over HTTP: `agency up` in a subprocess against
LangGraph in-process, on the same fake model and the same PostgreSQL server.

The workload. One agent (`bench-approver`, saved over HTTP): the built-in tools (`default`
tag) and approvals (`hitl`), with `config.hitl.tools = ["write_file"]`. The model (a
`FakeLLMServer(instant=True)` run by this process, scripted by a key in the user's message)
calls `write_file`; the run parks until a person approves; the tool runs; the model answers
with text and the run completes. `agency up --data-dir <tmp> --port 0` runs every service,
NATS and PostgreSQL with their durable defaults, its model pointed at the fake
(`OPENAI_BASE_URL`), with the per-tenant invoke limits off
(`AGENCY_TENANT_MAX_ACTIVE_RUNS=0`, `AGENCY_TENANT_MAX_PARKED_RUNS=0`,
`AGENCY_TENANT_INVOKES_PER_SECOND=0`, and its share of a saturated process,
`AGENCY_ADMISSION_ENABLED=false`: one tenant holds every thread of the benchmark). The
clients are httpx (one pool) and httpx-sse in this process.

LangGraph (`bench.langgraph_hitl`): model → `ToolNode` → model, `write_file` asking for
approval with `interrupt()`, `AsyncPostgresSaver` (pool of 20) on a PostgreSQL server of
its own with the same defaults (`bench.system_peer`); a run is `ainvoke` on a fresh
`thread_id`, a resume `ainvoke(Command(resume=...))` on it. It runs in this process.

The two sides take turns, so that both are measured on the machine as it is in the same
minutes (its speed drifts by tens of percent within minutes; a side measured a few minutes
after the other read a ratio the code did not make): `resume` and `ttft` in blocks of
`--block` samples, ours then LangGraph, then LangGraph then ours, and so on; LangGraph's
`create` right after ours. `parked` comes last, ours alone.

Lines (`bench: <name> ours=… baseline=… ratio=…`). For latencies the ratio is
baseline/ours, for rates and memory ours/baseline: above 1 means we are faster for
`resume`, `parked-resume`, `ttft` and `create`; for `parked` it is how many times the
start-up memory the parked threads take.
- `resume`: a thread parked on its approval; `POST …/approve`, until `run.completed` is on
  the thread's SSE stream (opened and read up to the pause before the clock starts): the
  tool and one model call in between. p50 ms over `--runs` threads after 5 warm-up ones
  (p90 and max printed too). LangGraph: `Command(resume=...)` until the graph ends, p50
  over as many samples, taken in turn with ours.
- `ttft`: `POST …/invoke` until the first `model.delta` is on the thread's SSE stream
  (opened before), less the fake's own time to first token (`--model-ttft-ms`, 50 ms: the
  scripted delay before its first chunk); p50 over `--runs` runs, each of which must then
  complete. LangGraph: `astream(stream_mode="messages")` until the first text chunk, same
  subtraction.
- `create`: `--threads` threads created and invoked, each in one request (`POST …/agents`
  with its first message, 202 once the runtime took the run up), by `--clients`
  concurrent clients; threads per second. How long until all are
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
  start-up and with the threads parked, and the p50/p90/max of the create requests.
- `parked-resume`: `resume` for 40 random threads among those parked; baseline: the
  `resume` p50 measured before (so the ratio shows what parking costs a resume).

Every measured run is checked: it parked on `run.paused` (reason `hitl`), completed with
the scripted answer; LangGraph's parked at an interrupt and ended with the tool's message
and the answer. Every wait has a deadline.

Run: `just bench system` (options: --runs N, --threads N, --parked N, --clients N,
--block N, --model-ttft-ms MS, --idle-window S, --skip-langgraph). Figures:
`docs/performance.md`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import uvloop

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.observability.logging import configure_logging
from bench.agent import ensure_langgraph
from bench.common import first_error, print_load
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
    until_parked,
)
from bench.system_peer import LangGraphSide, langgraph_side

WARMUP = 5
TOKEN_MS = 20
PARKED_RESUMES = 40
# One tenant holds every thread: its limits and its share of a saturated process are off.
LIMITS_OFF = {
    "AGENCY_TENANT_MAX_ACTIVE_RUNS": "0",
    "AGENCY_TENANT_MAX_PARKED_RUNS": "0",
    "AGENCY_TENANT_INVOKES_PER_SECOND": "0",
    "AGENCY_ADMISSION_ENABLED": "false",
}


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


Measure = Callable[[int], Awaitable[float]]


async def in_turn(
    count: int, block: int, ours: Measure, theirs: Measure | None
) -> tuple[list[float], list[float]]:
    """`count` samples of each side after `WARMUP` each, taken in blocks of `block` in
    turn (ours first, then theirs first, and so on): both see the same minutes of the
    machine. Sample indexes are unique per side; warm-up ones are negative."""
    for i in range(WARMUP):
        await ours(-1 - i)
        if theirs is not None:
            await theirs(-1 - i)
    mine: list[float] = []
    others: list[float] = []
    turn = 0
    while len(mine) < count:
        size = min(block, count - len(mine))
        sides = [(ours, mine), (theirs, others)]
        for measure, into in sides if turn % 2 == 0 else sides[::-1]:
            if measure is None:
                continue
            for _ in range(size):
                into.append(await measure(len(into)))
        turn += 1
    return mine, others


# --- the phases ------------------------------------------------------------------------------


async def phases(
    args: argparse.Namespace,
    system: RunningSystem,
    api: Api,
    peer: LangGraphSide | None,
    results: dict[str, float],
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

    resumes, lg_resumes = await in_turn(
        args.runs, args.block, one_resume, peer.resume if peer else None
    )
    say(f"resume: {spread(resumes)}")
    results["resume"] = statistics.median(resumes)
    if lg_resumes:
        say(f"langgraph resume: {spread(lg_resumes)}")
        results["lg-resume"] = statistics.median(lg_resumes)

    ttfts, lg_ttfts = await in_turn(
        args.runs,
        args.block,
        lambda i: first_token(api, agency, i, args.model_ttft_ms),
        peer.first_token if peer else None,
    )
    say(f"ttft: {spread(ttfts)} (less the fake's {args.model_ttft_ms} ms; the first text is "
        "handed on at once, the rest in 50 ms windows)")  # fmt: skip
    results["ttft"] = statistics.median(ttfts)
    if lg_ttfts:
        say(f"langgraph ttft: {spread(lg_ttfts)} (less the fake's {args.model_ttft_ms} ms)")
        results["lg-ttft"] = statistics.median(lg_ttfts)

    created_agency = await api.agency("bench-create")
    await api.blueprint(created_agency, BLUEPRINT)
    results["create"] = await fill(api, created_agency, args.threads, args.clients, "create")
    if peer is not None:
        results["lg-create"] = await peer.create(args.threads, args.clients)
        say(f"langgraph create: {args.threads:,} threads parked by {args.clients} tasks "
            f"({results['lg-create']:,.1f}/s)")  # fmt: skip

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
    rested = memory_of(system.pid)
    say(f"parked, after those {args.idle_window:g} s at rest: {rested.pss_mb:,.0f} MB PSS "
        f"({per_thread(rested, start, args.parked):.1f} KB more per parked thread); "
        f"by process: {by_kind(system.pid)}")  # fmt: skip

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
    say(f"{label}: POST …/agents with the first message {spread(created.request_ms)}")
    to_parked = count / (created.seconds + waited)
    say(f"{label}: {count:,} threads created and invoked by {clients} clients in "
        f"{created.seconds:.1f} s ({created.rate:,.1f}/s); all parked {waited:.1f} s "
        f"later ({to_parked:,.1f} threads/s to parked)")  # fmt: skip
    return float(created.rate)


# --- the run ---------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> dict[str, float]:
    configure_logging("json", level=40)  # LangGraph's PostgreSQL starts without a word
    results: dict[str, float] = {}
    async with FakeLLMServer(instant=True) as fake:
        script(fake, args.model_ttft_ms)
        print(
            f"system benchmark: agency up over HTTP; {args.runs} resumes and ttft runs, "
            f"{args.threads:,} created by {args.clients} clients, {args.parked:,} parked",
            flush=True,
        )
        async with (
            _peer(args, fake.base_url) as peer,
            RunningSystem(fake.base_url, LIMITS_OFF) as system,
        ):
            assert system.endpoints is not None
            async with Api(system.endpoints, connections=args.clients * 2 + 4) as api:
                try:
                    await phases(args, system, api, peer, results)
                except BaseException:
                    print(system.log_tail(), file=sys.stderr, flush=True)
                    raise
    return results


@asynccontextmanager
async def _peer(args: argparse.Namespace, model_url: str) -> AsyncIterator[LangGraphSide | None]:
    if args.skip_langgraph:
        yield None
        return
    async with langgraph_side(model_url, args.model_ttft_ms) as side:
        yield side


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
        "--block", type=int, default=5, help="resume and ttft samples a side takes in a turn"
    )
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
    if args.runs < 2 or min(args.threads, args.parked, args.clients, args.block) < 1:
        parser.error(
            "--runs needs at least 2; --threads, --parked, --clients and --block at least 1"
        )
    if not args.skip_langgraph:
        ensure_langgraph()
    print_load("before")
    try:
        results = uvloop.run(bench(args))
    except* BenchError as group:
        sys.exit(f"system benchmark failed: {first_error(group)}")
    print_load("after")
    report(results)


if __name__ == "__main__":
    main()
