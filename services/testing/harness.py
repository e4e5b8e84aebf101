"""`AgentHarness` and `run_tool`: a thread driven by the runtime's loop on an in-memory log,
a tool run as the tools service runs it (`services.testing` tells how to use them)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agency.contracts.commands import ApproveToolCalls, InvokeThread
from agency.contracts.events import (
    AnyEvent,
    BlueprintSpec,
    ChatMessage,
    ModelCompleted,
    ThreadCreated,
    ToolCall,
    ToolError,
    ToolRequested,
    ToolStarted,
)
from agency.contracts.ids import new_id
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.records import RecordedEvent
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import Tool, ToolContext
from agency.services.llm.port import Provider
from agency.services.runtime import commands
from agency.services.runtime.loop import ThreadDriver
from agency.services.runtime.replay.memstore import MemoryEventStore
from agency.services.threads.caches import BlueprintCache, ThreadCache
from agency.services.tool_execution.executor import execute

TENANT = "test-tenant"
AGENCY = "test-agency"
# Tool runs a harness makes for one `run` or `approve` before it gives up: a script that
# keeps calling tools ends on the blueprint's step limit long before.
_MAX_TOOL_ROUNDS = 200


class HarnessError(Exception):
    """The harness was asked for what it cannot do (an unknown tool or blueprint, an
    approval no run waits for)."""


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call's outcome: `output` (the text the model is given) or `error`."""

    name: str
    output: str = ""
    error: str | None = None
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


def _tool_of(target: AgentSystem | Tool, name: str) -> Tool:
    if isinstance(target, Tool):
        if target.name != name:
            raise HarnessError(f"the tool given is {target.name!r}, not {name!r}")
        return target
    found = target.external_tool(name)
    if found is None:
        raise HarnessError(f"the system has no tool {name!r} run by the tools service")
    return found


async def run_tool(
    target: AgentSystem | Tool, name: str, arguments: Mapping[str, Any] | str = "{}"
) -> ToolRun:
    """Run the tool `name` (of a system, or the `Tool` itself) with `arguments` (a dict, or
    the JSON text a model would send) as the tools service runs it; a failure, invalid
    arguments included, is the `error` the model would be given."""
    tool = _tool_of(target, name)
    text = arguments if isinstance(arguments, str) else _json(arguments)
    request = ToolRequested(
        run_id="run-test",
        step=1,
        call=ToolCall(id="call-test", name=name, arguments=text),
        timeout_ms=int(tool.timeout * 1000),
        max_attempts=tool.max_attempts,
    )
    context = ToolContext(
        tenant_id=TENANT, agency_id=AGENCY, thread_id="thread-test", run_id="run-test",
        call_id="call-test",
    )  # fmt: skip
    attempts: list[ToolStarted] = []

    async def started(event: ToolStarted) -> None:
        attempts.append(event)

    result = await execute(request, tool, context, on_attempt=started, backoff=())
    if isinstance(result, ToolError):
        return ToolRun(name=name, error=result.error, attempts=len(attempts))
    return ToolRun(name=name, output=result.output, attempts=len(attempts))


def _json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """A tool call the model made, and what became of it: its `output` or `error`, or
    `awaiting_approval` while a person's decision is pending."""

    id: str
    name: str
    arguments: str
    output: str | None = None
    error: str | None = None
    awaiting_approval: bool = False


@dataclass(frozen=True, slots=True)
class Transcript:
    """A run as the thread's log has it: its `status` (`completed`, `paused`, `error`,
    `canceled`), `reason` (why it paused or failed), every message of the thread, the tool
    calls of the run, and the event types the runtime appended for it, in order."""

    run_id: str
    status: str
    reason: str | None
    messages: tuple[ChatMessage, ...]
    tool_calls: tuple[ToolCallRecord, ...]
    events: tuple[str, ...]

    @property
    def answer(self) -> str | None:
        """The last assistant text of the thread, if any."""
        for message in reversed(self.messages):
            if message.role == "assistant" and message.content:
                return message.content
        return None

    @property
    def awaiting_approval(self) -> tuple[ToolCallRecord, ...]:
        """The calls held for a person's approval (`config.hitl.tools`)."""
        return tuple(c for c in self.tool_calls if c.awaiting_approval)

    def call(self, name: str) -> ToolCallRecord:
        """The run's last call of the tool `name`."""
        for record in reversed(self.tool_calls):
            if record.name == name:
                return record
        raise KeyError(f"the run called no tool {name!r}; it called {self._names()}")

    def _names(self) -> list[str]:
        return [c.name for c in self.tool_calls]


class AgentHarness:
    """One thread of `blueprint` (a name of the system's blueprints, or a `BlueprintSpec`)
    driven in process by the runtime's loop, `model` answering. See the module's
    docstring for what it does and does not do."""

    def __init__(
        self,
        system: AgentSystem,
        *,
        blueprint: str | BlueprintSpec,
        model: Provider,
    ) -> None:
        if isinstance(blueprint, BlueprintSpec):
            system = _with_blueprint(system, blueprint)
            blueprint = blueprint.name
        if blueprint not in system.blueprints:
            known = ", ".join(sorted(system.blueprints)) or "none"
            raise HarnessError(f"the system has no blueprint {blueprint!r}; it has: {known}")
        self.system = system
        self.blueprint = blueprint
        self.model = model
        self.store = MemoryEventStore()
        self.thread_id = "thread-" + new_id().lower()
        self._threads = ThreadCache(self.store)
        self._driver = ThreadDriver(
            self.store, system, model, self._threads, BlueprintCache(self.store)
        )
        self._created = False

    async def state(self) -> ThreadState:
        """The thread folded from its log, as the runtime sees it (todos, files, runs)."""
        return await self._threads.load(TENANT, self.thread_id)

    async def run(self, message: str, *, files: Mapping[str, str] | None = None) -> Transcript:
        """Send `message` (with `files` attached) and drive the run until it ends or waits
        for a person; the run's transcript."""
        if not self._created:
            created = ThreadCreated(agency_id=AGENCY, agent_type=self.blueprint)
            await self._append(await self.state(), [created])
            self._created = True
        run_id = "run-" + new_id().lower()
        command = InvokeThread(
            agency_id=AGENCY,
            thread_id=self.thread_id,
            run_id=run_id,
            messages=(ChatMessage(role="user", content=message),),
            files=dict(files or {}),
        )
        state = await self.state()
        await self._append(state, commands.invoke(state, command, run_id))
        return await self._settle(run_id)

    async def approve(
        self,
        approved: bool = True,
        *,
        modified: Sequence[ToolCall] | None = None,
        reason: str = "",
    ) -> Transcript:
        """Decide on the calls the run waits for, as `POST …/approve` does, and drive on."""
        state = await self.state()
        run = state.active_run
        if run is None or not run.hitl_pending:
            raise HarnessError("no run of this thread awaits approval")
        command = ApproveToolCalls(
            agency_id=AGENCY,
            thread_id=self.thread_id,
            approved=approved,
            modified_tool_calls=tuple(modified) if modified is not None else None,
            reason=reason,
        )
        await self._append(state, commands.approve(state, command))
        return await self._settle(run.run_id)

    async def _append(self, state: ThreadState, events: Sequence[AnyEvent]) -> None:
        await self.store.append(TENANT, "thread", self.thread_id, events, expected=state.position)

    async def _settle(self, run_id: str) -> Transcript:
        """Drive; run what the tools service would; again, until nothing is requested."""
        for _ in range(_MAX_TOOL_ROUNDS):
            state = await self._driver.drive(TENANT, self.thread_id)
            requests = self._open_requests(state)
            if not requests:
                return await self._transcript(run_id)
            for request in requests:
                await self._run_request(request)
        raise HarnessError(f"the run still requested tools after {_MAX_TOOL_ROUNDS} rounds")

    def _open_requests(self, state: ThreadState) -> list[ToolRequested]:
        run = state.active_run
        if run is None or run.status != "running":
            return []
        return [
            e.payload
            for e in self.store.events(TENANT, "thread", self.thread_id)
            if isinstance(e.payload, ToolRequested)
            and e.payload.run_id == run.run_id
            and state.outcome(e.payload.call.id) is None
        ]

    async def _run_request(self, request: ToolRequested) -> None:
        tool = self.system.external_tool(request.call.name)
        context = ToolContext(
            tenant_id=TENANT,
            agency_id=AGENCY,
            thread_id=self.thread_id,
            run_id=request.run_id,
            call_id=request.call.id,
        )
        started: list[AnyEvent] = []

        async def on_attempt(event: ToolStarted) -> None:
            started.append(event)

        result = await execute(request, tool, context, on_attempt=on_attempt, backoff=())
        await self._append(await self.state(), [*started, result])

    async def _transcript(self, run_id: str) -> Transcript:
        state = await self.state()
        run = state.run(run_id)
        recorded = [
            e
            for e in self.store.events(TENANT, "thread", self.thread_id)
            if getattr(e.payload, "run_id", None) == run_id
        ]
        pending = {c.id for c in run.hitl_pending} if run is not None else set()
        called = _called_in(recorded)
        calls = [
            c
            for m in state.messages
            if m.role == "assistant"
            for c in m.tool_calls
            if c.id in called
        ]
        records = []
        for c in calls:
            outcome = state.outcome(c.id)
            answer = next(
                (m.content for m in state.messages if m.role == "tool" and m.tool_call_id == c.id),
                None,
            )
            failed = outcome is not None and outcome.error
            records.append(
                ToolCallRecord(
                    id=c.id,
                    name=c.name,
                    arguments=c.arguments,
                    output=None if failed else answer,
                    error=answer if failed else None,
                    awaiting_approval=c.id in pending,
                )
            )
        return Transcript(
            run_id=run_id,
            status=run.status if run is not None else "registered",
            reason=(run.error or run.reason) if run is not None else None,
            messages=state.messages,
            tool_calls=tuple(records),
            events=tuple(e.type for e in recorded),
        )


def _called_in(recorded: Sequence[RecordedEvent]) -> set[str]:
    """The ids of the calls the run's model answers made."""
    return {
        c.id
        for e in recorded
        if isinstance(e.payload, ModelCompleted)
        for c in e.payload.message.tool_calls
    }


def _with_blueprint(system: AgentSystem, blueprint: BlueprintSpec) -> AgentSystem:
    """A copy of the system with `blueprint` among its blueprints; the system is unchanged."""
    extended = copy.copy(system)
    extended._blueprints = {**system.blueprints, blueprint.name: blueprint}
    return extended
