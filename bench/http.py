"""`just bench http`: one `langgraph-sdk` client script against our `/langgraph` routes and
against Aegra, the open-source LangGraph Agent Server, on this machine.

The same script (`bench.http_client`) drives both, with the same fake model
(`FakeLLMServer(instant=True)` in this process, scripted by a key in the user's message):

- ours: `agency up --data-dir <tmp> --port 0` in a subprocess (`bench.http_system`), the
  per-tenant invoke limits and the admission door's shares off (one tenant runs every
  thread, as on Aegra), an agency with the blueprint of `bench.system_ours` (the
  built-in tools and approvals, `write_file` held for a person), reached at
  `<api>/langgraph` with the tenant's key;
- Aegra: `aegra-api` in a virtualenv of its own (`bench.http_aegra`, installed on first
  use), serving `bench/aegra_graph.py` (model → tools → model, `write_file` calling
  `interrupt()`, `ChatOpenAI` at the fake), over a PostgreSQL of its own started here
  (`PostgresServer`, fsync on, loopback).

Lines (`bench: http-<metric> ours=… baseline=… ratio=…`, the baseline Aegra; above 1 means
ours is faster: baseline/ours for times, ours/baseline for throughput):
- `http-sequential`: p50 ms of `runs.wait` of one run (the model answers at once) on a
  thread created before, runs one after the other;
- `http-concurrent`: runs per second with `--concurrent` `runs.wait` at once, each on a
  thread of its own;
- `http-create`: p50 ms of `threads.create(graph_id=…)`;
- `http-resume`: p50 ms of `runs.wait(command={"resume": {"approved": True}})` on a thread
  parked at its interrupt, until the run ended with the answer (the tool and one model call
  in between);
- `http-ttft`: p50 ms of `runs.stream(stream_mode="messages")` until the first text, less
  the fake's own time to first token (`--model-ttft-ms`).
Both servers run from the start, and take each phase in turn (ours first in one phase,
Aegra first in the next), so that both are measured on the machine as it is in the same
minutes: its speed drifts by tens of percent within minutes, and a side measured a few
minutes after the other would read a ratio the code did not make. Each phase runs
`--warmup` unmeasured samples first. Every run is checked (completed with the scripted
answer, parked where it should, resumed to the answer); every wait bounded. The load
average is printed before and after: other work on the machine shows.

Run: `just bench http` (options: --runs N, --concurrent N, --model-ttft-ms MS, --warmup N,
--ours-only). Figures: `docs/performance.md`.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import uvloop

from agency.infra.launch import PostgresServer
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.observability.logging import configure_logging
from bench.common import first_error, print_load
from bench.http_client import (
    ANSWER,
    ANSWER_KEY,
    CONTENT,
    PATH,
    RESUME_KEY,
    RESUMED,
    TTFT_ANSWER,
    TTFT_KEY,
    Counts,
    Target,
    measure,
)
from bench.http_system import Api, BenchError, RunningSystem
from bench.system_ours import AGENT, BLUEPRINT

TOKEN_MS = 20
# One tenant runs every thread, as against Aegra: its limits and its share of a saturated
# process are off (as in `bench system`).
LIMITS_OFF = {
    "AGENCY_TENANT_MAX_ACTIVE_RUNS": "0",
    "AGENCY_TENANT_MAX_PARKED_RUNS": "0",
    "AGENCY_TENANT_INVOKES_PER_SECOND": "0",
    "AGENCY_ADMISSION_ENABLED": "false",
}
METRICS = (
    ("sequential", "time"),
    ("concurrent", "rate"),
    ("create", "time"),
    ("resume", "time"),
    ("ttft", "time"),
)


def script(fake: FakeLLMServer, model_ttft_ms: int) -> None:
    fake.script(ANSWER_KEY, [ScriptStep(content=ANSWER)])
    call = ScriptToolCall(name="write_file", arguments={"path": PATH, "content": CONTENT})
    fake.script(RESUME_KEY, [ScriptStep(tool_calls=(call,)), ScriptStep(content=RESUMED)])
    step = ScriptStep(content=TTFT_ANSWER, delay_ms=model_ttft_ms, stream_delay_ms=TOKEN_MS)
    fake.script(TTFT_KEY, [step])


@asynccontextmanager
async def ours(model_url: str) -> AsyncIterator[tuple[Target, Callable[[], str]]]:
    """`agency up` with the benchmark's agency: its target, and its log's tail."""
    async with RunningSystem(model_url, LIMITS_OFF) as system:
        assert system.endpoints is not None and system.endpoints.api_url
        async with Api(system.endpoints, connections=8) as api:
            agency = await api.agency("bench-http")
            await api.blueprint(agency, BLUEPRINT)
        yield (
            Target(
                name="ours",
                url=f"{system.endpoints.api_url}/langgraph",
                assistant=AGENT,
                api_key=system.endpoints.api_key,
                headers={"x-agency-id": agency},
            ),
            system.log_tail,
        )


@asynccontextmanager
async def aegra(python: Path, model_url: str) -> AsyncIterator[tuple[Target, Callable[[], str]]]:
    """Aegra over a PostgreSQL of its own: its target, and its log's tail."""
    from bench.http_aegra import GRAPH_ID, AegraServer, postgres_settings

    with tempfile.TemporaryDirectory(prefix="agency-bench-aegra-pg-") as tmp:
        settings = postgres_settings(Path(tmp) / "share")
        async with (
            PostgresServer(Path(tmp) / "pg", fsync=True, settings=settings) as pg,
            AegraServer(python, pg.url, model_url) as server,
        ):
            yield Target(name="aegra", url=server.url, assistant=GRAPH_ID), server.log_tail


async def bench(args: argparse.Namespace, python: Path | None) -> list[str]:
    configure_logging("json", level=40)  # the embedded PostgreSQL's start-up says nothing
    counts = Counts(
        sequential=args.runs,
        concurrent=args.concurrent,
        creates=args.runs,
        resumes=args.runs,
        ttfts=args.runs,
        warmup=args.warmup,
        model_ttft_ms=args.model_ttft_ms,
    )
    async with FakeLLMServer(instant=True) as fake, contextlib.AsyncExitStack() as stack:
        script(fake, args.model_ttft_ms)
        sides = [await stack.enter_async_context(ours(fake.base_url))]
        if python is not None:
            sides.append(await stack.enter_async_context(aegra(python, fake.base_url)))
        print_load("before")
        try:
            results = await measure([target for target, _ in sides], counts)
        except BaseException:
            for target, log_tail in sides:
                print(f"{target.name}:\n{log_tail()}", file=sys.stderr, flush=True)
            raise
        print_load("after")
    mine, theirs = results["ours"], results.get("aegra", {})
    return [line(name, kind, mine[name], theirs.get(name, 0.0)) for name, kind in METRICS]


def line(name: str, kind: str, ours: float, baseline: float) -> str:
    if kind == "time":
        ratio = baseline / ours if ours else 0.0
    else:
        ratio = ours / baseline if baseline else 0.0
    return f"bench: http-{name} ours={ours:.1f} baseline={baseline:.1f} ratio={ratio:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="just bench http")
    parser.add_argument("--runs", type=int, default=20, help="samples per latency metric")
    parser.add_argument("--concurrent", type=int, default=50, help="runs at once")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured samples per phase")
    parser.add_argument(
        "--model-ttft-ms", type=int, default=50, help="the fake model's time to first token"
    )
    parser.add_argument("--ours-only", action="store_true", help="no Aegra (baseline 0)")
    args = parser.parse_args()
    if args.runs < 1 or args.concurrent < 1 or args.warmup < 0:
        parser.error("--runs and --concurrent need at least 1, --warmup at least 0")
    print(
        f"http benchmark: {args.runs} samples per metric, {args.concurrent} concurrent runs, "
        "one langgraph-sdk client script against ours and Aegra, phase by phase in turn",
        flush=True,
    )
    try:
        python = None
        if not args.ours_only:
            from bench.http_aegra import ensure_aegra

            python = ensure_aegra()
        lines = uvloop.run(bench(args, python))
    except* BenchError as group:
        sys.exit(f"http benchmark failed: {first_error(group)}")
    for text in lines:
        print(text, flush=True)


if __name__ == "__main__":
    main()
