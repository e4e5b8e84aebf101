"""What sealing thread data costs: `bench agent`'s sequential runs and `bench system`'s
resume, each with events sealed against the same in clear, in one run, the two taking
turns.

- `encryption-sequential`: `bench agent`'s workload (a two-step tool-calling agent, the
  registry, runtime and tools services in this process, on embedded NATS and PostgreSQL
  with their durable defaults, the fake model over HTTP), `--runs` runs one after another,
  each on a fresh thread; runs per second, median of `--rounds`. Both sides are the same
  services on the same servers: sealed, the process's cipher is installed, as on every
  process by default; clear, none is, as `AGENCY_ENCRYPTION=off` leaves a process. The
  side going first alternates between rounds. Ratio sealed/clear (rates): 1 is free, 0.909
  is the 10 % the design allows.
- `encryption-resume`: `bench system`'s resume (a thread parked on its approval; `POST
  …/approve` until `run.completed` is on its SSE stream) against two `agency up`, one
  with `AGENCY_ENCRYPTION=off`, both up at once, in blocks of `--block` samples in turn;
  p50 ms of `--resumes` samples after 5 warm-up ones each. Ratio clear/sealed (times):
  above 0.909 meets the 10 %.

Every run is checked as in `bench agent` and `bench system`; every wait has a deadline.
Run: `just bench encryption` (options: --runs N, --rounds N, --resumes N, --block N,
--skip-agent, --skip-system).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable

import uvloop

from agency.contracts.sealed import PayloadCipher, install_cipher
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.gc_tuning import tune_gc
from agency.infra.keystore import current_cipher
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.observability.logging import configure_logging
from bench import agent
from bench.common import embedded_servers, print_load
from bench.http_system import Api, BenchError, RunningSystem
from bench.system import LIMITS_OFF, Measure, in_turn, latency_line, rate_line, say, script, spread
from bench.system_ours import BLUEPRINT, park, resume

ENCRYPTION_ON = {"AGENCY_ENCRYPTION": "on"}
ENCRYPTION_OFF = {"AGENCY_ENCRYPTION": "off"}


# --- bench agent's sequential runs, sealed and in clear ------------------------------------


def toggled(ours: agent.Ours, cipher: PayloadCipher | None) -> agent.Prepare:
    """Our side's phases with the process's cipher installed (sealed) or none (in clear).
    Closing the services' connections installs the process's cipher again."""

    async def prepare(phase: str, count: int) -> tuple[agent.RunFn, Callable[[], None]]:
        install_cipher(cipher)
        run, check = await ours.prepare(phase, count)

        # The phase's last run looks at how its last event was stored (both sides alike).
        async def run_and_look(index: int) -> None:
            await run(index)
            if index == count - 1:
                info = await ours.bus.js.stream_info(EVENTS_STREAM)
                last = await ours.bus.js.get_msg(EVENTS_STREAM, seq=info.state.last_seq)
                stored.append(b'"sealed":{' in (last.data or b""))

        def check_sealed() -> None:
            check()
            if stored[-1] != (cipher is not None):
                side, was = ("sealed", "in clear") if cipher is not None else ("clear", "sealed")
                raise BenchError(f"the {side} side's last event was stored {was}")

        return run_and_look, check_sealed

    stored: list[bool] = []
    return prepare


async def agent_sequential(args: argparse.Namespace) -> tuple[float, float]:
    async with embedded_servers() as servers, agent.fake_model() as fake:
        fake.script(
            agent.SCRIPT_KEY,
            [
                ScriptStep(
                    tool_calls=(ScriptToolCall(name="lookup", arguments={"word": agent.WORD}),)
                ),
                ScriptStep(content=agent.ANSWER),
            ],
        )
        async with agent.our_side(servers.nats_url, servers.database_url, fake.base_url) as ours:
            cipher = current_cipher()
            if cipher is None:
                raise BenchError("no cipher installed: unset AGENCY_ENCRYPTION to measure it")
            sides = {"sealed": toggled(ours, cipher), "clear": toggled(ours, None)}
            tune_gc()
            runs = {name: agent.Results() for name in sides}
            for prepare in sides.values():
                run, check = await prepare("warmup", agent.WARMUP_RUNS)
                await agent.sequential(run, agent.WARMUP_RUNS)
                check()
            for round_ in range(args.rounds):
                order = list(sides.items())
                for name, prepare in order if round_ % 2 == 0 else order[::-1]:
                    run, check = await prepare(f"{name}{round_}", args.runs)
                    runs[name].sequential.append(await agent.sequential(run, args.runs))
                    check()
    say(f"agent sequential, sealed: {runs['sealed'].latency()}")
    say(f"agent sequential, clear: {runs['clear'].latency()}")
    return runs["sealed"].sequential_rate(), runs["clear"].sequential_rate()


# --- bench system's resume, against a system sealing and one in clear ----------------------


async def system_resume(args: argparse.Namespace) -> tuple[float, float]:
    async with FakeLLMServer(instant=True) as fake:
        script(fake, model_ttft_ms=50)
        async with (
            RunningSystem(fake.base_url, {**LIMITS_OFF, **ENCRYPTION_ON}) as sealing,
            RunningSystem(fake.base_url, {**LIMITS_OFF, **ENCRYPTION_OFF}) as clear,
        ):
            assert sealing.endpoints is not None and clear.endpoints is not None
            async with (
                Api(sealing.endpoints) as sealed_api,
                Api(clear.endpoints) as clear_api,
            ):

                async def resumer(api: Api) -> Measure:
                    agency = await api.agency("bench")
                    await api.blueprint(agency, BLUEPRINT)

                    async def one(i: int) -> float:
                        thread, run_id = await park(api, agency, f"resume-{i}")
                        return await resume(api, agency, thread, run_id)

                    return one

                try:
                    sealed, clear_ms = await in_turn(
                        args.resumes,
                        args.block,
                        await resumer(sealed_api),
                        await resumer(clear_api),
                    )
                except BaseException:
                    print(sealing.log_tail(), clear.log_tail(), sep="\n", file=sys.stderr)
                    raise
            await stored_as(sealing, sealed=True)
            await stored_as(clear, sealed=False)
    say(f"system resume, sealed: {spread(sealed)}")
    say(f"system resume, clear: {spread(clear_ms)}")
    return statistics.median(sealed), statistics.median(clear_ms)


async def stored_as(system: RunningSystem, *, sealed: bool) -> None:
    """The system's last event was stored sealed, or in clear, as its side says."""
    from agency.infra.jetstream.natsclient import connect

    assert system.endpoints is not None
    nc = await connect(system.endpoints.nats_url, connect_timeout=10)
    try:
        js = nc.jetstream(timeout=10)
        info = await js.stream_info(EVENTS_STREAM)
        last = await js.get_msg(EVENTS_STREAM, seq=info.state.last_seq)
    finally:
        await nc.close()
    if (b'"sealed":{' in (last.data or b"")) != sealed:
        side = "sealing" if sealed else "AGENCY_ENCRYPTION=off"
        raise BenchError(
            f"the {side} system stored its last event {'in clear' if sealed else 'sealed'}"
        )


async def bench(args: argparse.Namespace) -> list[str]:
    configure_logging("json", level=40)
    print(
        f"encryption benchmark: sealed against AGENCY_ENCRYPTION=off; agent: {args.runs} "
        f"sequential runs x {args.rounds} round(s); system: {args.resumes} resumes in blocks "
        f"of {args.block}",
        flush=True,
    )
    lines: list[str] = []
    if not args.skip_agent:
        sealed, clear = await agent_sequential(args)
        lines.append(rate_line("encryption-sequential", sealed, clear))
    if not args.skip_system:
        sealed, clear = await system_resume(args)
        lines.append(latency_line("encryption-resume", sealed, clear))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="just bench encryption")
    parser.add_argument("--runs", type=int, default=100, help="sequential runs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are reported")
    parser.add_argument("--resumes", type=int, default=20, help="resumes measured per side")
    parser.add_argument("--block", type=int, default=5, help="resumes a side takes in a turn")
    parser.add_argument("--skip-agent", action="store_true", help="no agent sequential runs")
    parser.add_argument("--skip-system", action="store_true", help="no system resumes")
    args = parser.parse_args()
    if args.runs < 2 or args.rounds < 1 or args.resumes < 2 or args.block < 1:
        parser.error("--runs and --resumes need at least 2, --rounds and --block at least 1")
    print_load("before")
    try:
        lines = uvloop.run(bench(args))
    except* BenchError as group:
        sys.exit(f"encryption benchmark failed: {group.exceptions[0]}")
    print_load("after")
    for line in lines:
        print(line, flush=True)


if __name__ == "__main__":
    main()
