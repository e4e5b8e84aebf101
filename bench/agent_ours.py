"""Our side of `just bench agent` (`bench/agent.py`): the registry, runtime and tools
services with the `lookup` tool declared local, and a run as an `InvokeThread` command
followed in the log until its terminal event."""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from nats.js.errors import NotFoundError

from agency.contracts.commands import CreateAgency, CreateThread, InvokeThread
from agency.contracts.events import BlueprintSpec, ChatMessage, RunCompleted, RunError, ToolOutput
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.contracts.subjects import (
    COMMANDS_STREAM,
    EVENTS_STREAM,
    aggregate_events_filter,
)
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.reader import OrderedReader
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.jetstream.streams import provision
from agency.projections.rebuild import last_stream_seq
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import ToolContext, define_tool
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig, run_stack
from bench.agent_workload import (
    AGENT,
    ANSWER,
    MODEL,
    PROMPT,
    SETUP_TIMEOUT,
    STOP_TIMEOUT,
    TOOL_OUTPUT,
    BenchError,
    RunFn,
    question,
)


async def lookup(args: dict[str, Any], ctx: ToolContext) -> str:
    """Look a word up."""
    return f"definition of {args.get('word')}"


def bench_system() -> AgentSystem:
    # Pure and fast: declared local, the runtime runs it (as LangGraph's ToolNode does).
    tool = define_tool(
        lookup,
        parameters={"type": "object", "properties": {"word": {"type": "string"}}},
        local=True,
    )
    return (
        AgentSystem(default_model=f"openai:{MODEL}")
        .add_tool(tool, ["lookup"])
        .add_agent(BlueprintSpec(name=AGENT, prompt=PROMPT, tags=("lookup",)))
    )


@dataclass
class Watch:
    """What the log said about one aggregate so far."""

    created: asyncio.Future[None]
    terminal: asyncio.Future[RecordedEvent]
    tool_outputs: list[str] = field(default_factory=list)


class LogWatcher:
    """Follows a tenant's events with one ordered reader and resolves waits per aggregate."""

    def __init__(self, bus: Bus, tenant: str) -> None:
        self._bus = bus
        self._tenant = tenant
        self._watches: dict[tuple[str, str], Watch] = {}

    def watch(self, aggregate: str, aggregate_id: str) -> Watch:
        key = (aggregate, aggregate_id)
        found = self._watches.get(key)
        if found is None:
            loop = asyncio.get_running_loop()
            found = self._watches[key] = Watch(loop.create_future(), loop.create_future())
        return found

    def subjects(self) -> list[str]:
        """The tenant's agencies and threads, as a client waiting for its runs would
        subscribe (one subject per aggregate: every event of each is delivered, and the
        ones no wait looks at are passed over)."""
        return [aggregate_events_filter(a, self._tenant) for a in ("agency", "thread")]

    async def run(self, start_seq: int, stop: asyncio.Event) -> None:
        reader = OrderedReader(self._bus.js, self.subjects(), start_seq=start_seq)
        async with reader:
            while not stop.is_set():
                for event in await reader.next_batch(timeout=0.2):
                    if isinstance(event, RecordedEvent):
                        self._on_event(event)

    def _on_event(self, event: RecordedEvent) -> None:
        envelope = event.envelope
        watch = self._watches.get((envelope.aggregate, envelope.aggregate_id))
        if watch is None:
            return
        if event.type in ("thread.created", "agency.created") and not watch.created.done():
            watch.created.set_result(None)
        elif isinstance(event.payload, ToolOutput):
            watch.tool_outputs.append(event.payload.output)
        elif event.type in RUN_TERMINAL_TYPES and not watch.terminal.done():
            watch.terminal.set_result(event)


def problem_of(watch: Watch) -> str | None:
    """Why a finished run of ours does not count, or None when it did the workload."""
    terminal = watch.terminal.result()
    payload = terminal.payload
    if isinstance(payload, RunError):
        return f"ended in {terminal.type}: {payload.error}"
    if not isinstance(payload, RunCompleted):
        return f"ended in {terminal.type}"
    if payload.result != ANSWER:
        return f"answered {payload.result!r}, not the scripted answer"
    if watch.tool_outputs != [TOOL_OUTPUT]:
        return f"tool outputs {watch.tool_outputs!r}, expected [{TOOL_OUTPUT!r}]"
    return None


class Ours:
    """Our services in this process, a tenant and an agency, and a watcher on the log."""

    def __init__(self, bus: Bus, watcher: LogWatcher, tenant: str, agency: str) -> None:
        self.bus = bus
        self.watcher = watcher
        self.tenant = tenant
        self.agency = agency
        self.events_per_run = 0

    async def create_threads(self, count: int) -> list[str]:
        """Threads for the runs to come: set-up, not measured."""
        threads = [new_id() for _ in range(count)]
        created = [self.watcher.watch("thread", t).created for t in threads]
        async with asyncio.timeout(SETUP_TIMEOUT):
            for start in range(0, count, 100):
                await asyncio.gather(
                    *(
                        self.bus.commands.send(
                            self.tenant,
                            CreateThread(agency_id=self.agency, thread_id=t, agent_type=AGENT),
                        )
                        for t in threads[start : start + 100]
                    )
                )
            await asyncio.gather(*created)
        return threads

    async def run(self, thread: str, index: int) -> None:
        """Invoke the thread and wait until its run's terminal event is in the log."""
        watch = self.watcher.watch("thread", thread)
        await self.bus.commands.send(
            self.tenant,
            InvokeThread(
                agency_id=self.agency,
                thread_id=thread,
                run_id="run_" + new_id(),
                messages=(ChatMessage(role="user", content=question(index)),),
            ),
        )
        await watch.terminal

    async def prepare(self, phase: str, count: int) -> tuple[RunFn, Callable[[], None]]:
        """`count` fresh threads; a run function over them and a check of what they did.

        The threads are created right before their phase, as a client creates a thread and
        then talks to it: an aggregate whose last event lies far back in the stream costs
        more to read, which set-up done long in advance would add to later rounds.
        """
        threads = await self.create_threads(count)

        async def run(index: int) -> None:
            await self.run(threads[index], index)

        def check() -> None:
            watches = [self.watcher.watch("thread", t) for t in threads]
            problems = [p for w in watches if (p := problem_of(w))]
            if problems:
                raise BenchError(f"{len(problems)} of our runs failed, e.g.: {problems[0]}")
            # The terminal's place in its thread, less the thread's creation.
            ends = [w.terminal.result().envelope.seq - 1 for w in watches]
            self.events_per_run = round(statistics.mean(ends))

        return run, check


async def wait_for_consumers(bus: Bus, names: dict[str, str], timeout: float = 15.0) -> None:
    """Until every service created its consumer, so the first run is not a start-up race."""
    async with asyncio.timeout(timeout):
        for name, stream in names.items():
            while True:
                with contextlib.suppress(NotFoundError):
                    await bus.js.consumer_info(stream, name)
                    break
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def our_side(nats_url: str, database_url: str, model_url: str) -> AsyncIterator[Ours]:
    provider = OpenAIProvider(base_url=model_url, api_key="fake")
    stop = asyncio.Event()
    # One tenant runs every thread of the benchmark: no per-tenant limit on active runs.
    os.environ.setdefault("AGENCY_TENANT_MAX_ACTIVE_RUNS", "0")
    os.environ.setdefault("AGENCY_TENANT_MAX_PARKED_RUNS", "0")
    config = StackConfig(
        nats_url=nats_url,
        database_url=database_url,
        system=bench_system(),
        provider=provider,
        services=("registry", "runtime", "tools"),
    )
    tenant = "bench" + new_id()[-8:].lower()
    try:
        async with Bus(nats_url, name="bench-agent") as bus:
            await provision(bus.js)
            watcher = LogWatcher(bus, tenant)
            start_seq = await last_stream_seq(bus.js) + 1
            async with asyncio.TaskGroup() as tg:
                tasks = {
                    tg.create_task(run_stack(config, stop), name="stack"),
                    tg.create_task(watcher.run(start_seq, stop), name="watcher"),
                }
                try:
                    consumers = {
                        "registry-commands": COMMANDS_STREAM,
                        "runtime-commands": COMMANDS_STREAM,
                        "runtime-triggers": EVENTS_STREAM,
                        "tools": EVENTS_STREAM,
                    }
                    await wait_for_consumers(bus, consumers)
                    agency = new_id()
                    created = watcher.watch("agency", agency).created
                    await bus.commands.send(tenant, CreateAgency(agency_id=agency, name="bench"))
                    await asyncio.wait_for(created, SETUP_TIMEOUT)
                    yield Ours(bus, watcher, tenant, agency)
                finally:
                    stop.set()
                    _, late = await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
                    for task in late:
                        task.cancel()
    finally:
        await provider.close()
