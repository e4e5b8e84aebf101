"""A workload of threads with tools, HITL and subagents, driven over the bus from the test
process, and the invariants every history must keep whatever was killed meanwhile."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import nats.errors
import stamina

from agency.contracts.commands import (
    ApproveToolCalls,
    Command,
    CreateAgency,
    CreateThread,
    InvokeThread,
)
from agency.contracts.events import ChatMessage
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.tasks import cancel_and_wait
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.llm.fake_server import FakeLLMServer

T = TypeVar("T")
Kind = Literal["tools", "subagent", "hitl"]
AGENT_OF: dict[Kind, str] = {"tools": "worker", "subagent": "manager", "hitl": "approver"}
# What a client meets while a server restarts: retried until the outage ends.
OUTAGE = (nats.errors.Error, TimeoutError, ConnectionError, OSError)


async def across_outages(fn: Callable[[], Awaitable[T]], *, timeout: float = 60.0) -> T:
    """`fn()`, retried while NATS is away (a killed node, a restart), at most `timeout` s."""
    async for attempt in stamina.retry_context(
        on=OUTAGE, attempts=None, timeout=timeout, wait_initial=0.2, wait_max=2.0, wait_jitter=0.2
    ):
        with attempt:
            return await fn()
    raise AssertionError("unreachable")


def lookup(word: str) -> dict[str, object]:
    return {"name": "lookup", "arguments": {"word": word}}


@dataclass
class Planned:
    thread: str
    kind: Kind
    key: str
    # Script keys this thread's tree uses, with the number of model steps each must take.
    steps: dict[str, int] = field(default_factory=dict)


@dataclass
class Workload:
    bus: Bus
    llm: FakeLLMServer
    tenant: str
    threads: int
    kinds: tuple[Kind, ...] = ("tools", "subagent", "hitl")
    agency: str = field(default_factory=new_id)
    planned: list[Planned] = field(default_factory=list)
    _approver: asyncio.Task[None] | None = None

    async def _send(self, command: Command, key: str) -> None:
        await across_outages(
            lambda: self.bus.commands.send(self.tenant, command, idempotency_key=key)
        )

    async def events(self, thread: str) -> list[RecordedEvent]:
        return await across_outages(lambda: self.bus.store.read(self.tenant, "thread", thread))

    async def setup(self) -> None:
        """The agency, the threads and their scripts; nothing runs yet."""
        await self._send(CreateAgency(agency_id=self.agency, name="chaos"), f"agency-{self.agency}")

        async def agency_exists() -> bool:
            return bool(
                await across_outages(
                    lambda: self.bus.store.read(self.tenant, "agency", self.agency)
                )
            )

        await self._until(agency_exists, timeout=120)
        kinds = itertools.cycle(self.kinds)
        for _ in range(self.threads):
            kind = next(kinds)
            thread = new_id()
            key = f"{kind}-{thread}-{self.tenant}"
            plan = Planned(thread=thread, kind=kind, key=key)
            self._script(plan)
            self.planned.append(plan)
            await self._send(
                CreateThread(agency_id=self.agency, thread_id=thread, agent_type=AGENT_OF[kind]),
                f"create-{thread}",
            )
        for plan in self.planned:
            await self._until(lambda p=plan: self._exists(p.thread), timeout=120)

    def _script(self, plan: Planned) -> None:
        if plan.kind == "subagent":
            child = f"c{plan.thread}"  # shorter than the parent's key: the parent keeps its own
            task = {
                "name": "task",
                "arguments": {"description": f"{child} look it up", "subagentType": "worker"},
            }
            self.llm.script(
                plan.key,
                [ScriptStep(tool_calls=[lookup("tea"), task]), ScriptStep(content="all reported")],  # type: ignore[list-item]
            )
            self.llm.script(
                child,
                [ScriptStep(tool_calls=[lookup("leaf")]), ScriptStep(content="child done")],  # type: ignore[list-item]
            )
            plan.steps = {plan.key: 2, child: 2}
            return
        final = "approved and done" if plan.kind == "hitl" else "looked it up"
        self.llm.script(
            plan.key,
            [ScriptStep(tool_calls=[lookup(plan.kind)]), ScriptStep(content=final)],  # type: ignore[list-item]
        )
        plan.steps = {plan.key: 2}

    async def _exists(self, thread: str) -> bool:
        return bool(await self.events(thread))

    async def _until(self, check: Callable[[], Awaitable[bool]], *, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await check():
            if loop.time() >= deadline:
                raise AssertionError(f"not reached within {timeout}s")
            await asyncio.sleep(0.2)

    async def start(self) -> None:
        """Invoke every thread, and approve HITL interrupts as they come."""
        for plan in self.planned:
            await self._send(
                InvokeThread(
                    agency_id=self.agency,
                    thread_id=plan.thread,
                    run_id="run_" + new_id(),
                    messages=(ChatMessage(role="user", content=plan.key),),
                ),
                f"invoke-{plan.thread}",
            )
        self._approver = asyncio.create_task(self._approve_forever(), name="approver")

    async def _approve_forever(self) -> None:
        hitl = [p for p in self.planned if p.kind == "hitl"]
        while True:
            for plan in hitl:
                try:
                    events = await self.bus.store.read(self.tenant, "thread", plan.thread)
                except Exception:  # a person clicks again: whatever the broker said, go on
                    continue
                types = [e.type for e in events]
                if "hitl.interrupt" not in types:
                    continue
                interrupt = max(e.seq for e in events if e.type == "hitl.interrupt")
                if any(e.type == "hitl.resume" and e.seq > interrupt for e in events):
                    continue
                command = ApproveToolCalls(
                    agency_id=self.agency, thread_id=plan.thread, approved=True
                )
                try:
                    await self.bus.commands.send(
                        self.tenant, command, idempotency_key=f"approve-{plan.thread}-{interrupt}"
                    )
                except Exception:
                    continue
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._approver is not None:
            await cancel_and_wait([self._approver])

    async def trees(self) -> dict[str, list[RecordedEvent]]:
        """Every thread's history: the planned ones and the children they spawned."""
        histories: dict[str, list[RecordedEvent]] = {}
        pending = [p.thread for p in self.planned]
        while pending:
            thread = pending.pop()
            events = await self.events(thread)
            histories[thread] = events
            pending += [e.payload.child_thread_id for e in events if e.type == "subagent.spawned"]
        return histories

    async def settle(self, timeout: float) -> dict[str, list[RecordedEvent]]:
        """Wait until every run of every thread (children included) has ended."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            histories = await self.trees()
            open_runs = unfinished(histories)
            if not open_runs:
                return histories
            if loop.time() >= deadline:
                raise AssertionError(f"runs still open after {timeout}s: {open_runs[:10]}")
            await asyncio.sleep(0.5)


def unfinished(histories: dict[str, list[RecordedEvent]]) -> list[str]:
    """Threads whose runs did not all end (a thread without any run counts as open)."""
    out = []
    for thread, events in histories.items():
        started = {e.payload.run_id for e in events if e.type == "run.started"}
        ended = {e.payload.run_id for e in events if e.type in RUN_TERMINAL_TYPES}
        if not started or started - ended:
            tail = ", ".join(f"{e.seq}:{e.type}" for e in events[-8:])
            out.append(f"{thread} (… {tail})")
    return out


def violations(histories: dict[str, list[RecordedEvent]]) -> list[str]:
    """What breaks the log's promises: gaps, runs without exactly one end, tool calls
    without exactly one result."""
    found = []
    for thread, events in histories.items():
        seqs = [e.seq for e in events]
        if seqs != list(range(1, len(events) + 1)):
            found.append(f"{thread}: sequence has gaps or repeats: {seqs}")
        ends = Counter(e.payload.run_id for e in events if e.type in RUN_TERMINAL_TYPES)
        for run in {e.payload.run_id for e in events if e.type == "run.started"}:
            if ends[run] != 1:
                found.append(f"{thread}: run {run} has {ends[run]} terminal events")
        requested = {e.payload.call.id for e in events if e.type == "tool.requested"}
        results = Counter(
            e.payload.tool_call_id for e in events if e.type in ("tool.output", "tool.error")
        )
        for call in requested:
            if results[call] != 1:
                found.append(f"{thread}: tool call {call} has {results[call]} results")
        found += [f"{thread}: {call} answered {n} times" for call, n in results.items() if n > 1]
    return found


def outcomes(histories: dict[str, list[RecordedEvent]]) -> Counter[str]:
    """How the runs ended: `run.completed`, `run.canceled`, `run.error: <kind>: <message>`."""
    counted: Counter[str] = Counter()
    for events in histories.values():
        for e in events:
            if e.type == "run.error":
                counted[f"run.error: {e.payload.kind}: {e.payload.error[:80]}"] += 1
            elif e.type in RUN_TERMINAL_TYPES:
                counted[e.type] += 1
    return counted


def model_calls_per_step(
    llm: FakeLLMServer, plans: list[Planned]
) -> tuple[dict[str, list[str]], int]:
    """Per script key, the steps answered more or less than once; and how many calls were
    cut short (their client went away: a killed worker)."""
    finished: dict[tuple[str, int], int] = defaultdict(int)
    cut: Counter[str] = Counter()
    for call in llm.calls:
        if call.key is None:
            continue
        if call.finished:
            finished[(call.key, call.step)] += 1
        else:
            cut[call.key] += 1
    problems: dict[str, list[str]] = {}
    for plan in plans:
        for key, steps in plan.steps.items():
            wrong = [
                f"step {s} answered {finished[(key, s)]} times"
                for s in range(steps + 1)
                if finished[(key, s)] != (1 if s < steps else 0)
            ]
            if wrong:
                problems[key] = wrong
    return problems, sum(cut.values())
