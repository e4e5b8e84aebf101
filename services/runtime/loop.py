"""Driving a thread: apply `next_action` until the thread waits for something else.

The loop is the only place the runtime performs I/O for a run: appends, and model calls
through the provider (`model_call.py`: made while the step's opening is stored). Every
append names the position it decided from; when another writer got there first (the tools
service, a cancel, a second runtime worker) the loop reloads and decides again, so a
thread's events stay one gap-free sequence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

import structlog
from opentelemetry import trace

from agency.contracts.events import (
    AgentError,
    AnyEvent,
    BlueprintSpec,
    RunError,
)
from agency.domain.thread_state import ThreadState
from agency.infra.jetstream.ports import AggregateStore
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.keyed_locks import KeyedLocks
from agency.services.agents.system import AgentSystem
from agency.services.decide import CONFLICT_ATTEMPTS
from agency.services.llm.provider import ModelError, Provider
from agency.services.runtime import model_step
from agency.services.runtime.actions import Action, Append, CallModel, Wait, next_action
from agency.services.runtime.appends import ThreadAppends
from agency.services.runtime.code_runner import CodeRuns
from agency.services.runtime.decision import Decision
from agency.services.runtime.failures import (
    LoopDidNotSettle,
    MiddlewareFailed,
    describe,
    failure_kind,
    is_retried,
    run_failed,
)
from agency.services.runtime.local_tools import run_local_calls
from agency.services.runtime.model_call import (
    ModelAborted,
    ModelCalls,
    Opening,
    answered_whole,
    discard,
)
from agency.services.runtime.model_step import Resolved
from agency.services.runtime.pending import simulate, still_ours
from agency.services.runtime.reports import child_report_hooks
from agency.services.runtime.resolution import BlueprintResolver
from agency.services.runtime.tool_hooks import tool_event_hooks
from agency.services.runtime.tool_sources import McpTools, RemoteAgentTools
from agency.services.runtime.toolset import tools_now
from agency.services.runtime.tree_admission import admit_spawns
from agency.services.runtime.view import StepContext
from agency.services.tenancy.env import TenantEnvSettings
from agency.services.threads.agent_trees import AgentTrees
from agency.services.threads.caches import BlueprintCache, ThreadCache
from agency.services.threads.view import thread_view

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

_MAX_ITERATIONS = 500
# Drives of one thread handed between the model loop and a code agent's runner in a row.
_HANDOVERS = 8
# How long a step's opening waits for the model's answer before it is appended alone: an
# answer that comes whole meanwhile goes into the same atomic append. Shorter than any
# model's time to first token that is worth streaming, so a streamed answer's first text
# still finds its opening stored.
OPENING_HOLD = 0.02


class UnknownThread(Exception):
    """The thread has no `thread.created` yet (its create command may still be in flight)."""

    def __init__(self, tenant_id: str, thread_id: str) -> None:
        super().__init__(f"thread {thread_id} of tenant {tenant_id} is not registered (yet)")


class ThreadDriver:
    def __init__(
        self,
        store: AggregateStore,
        system: AgentSystem,
        provider: Provider,
        threads: ThreadCache,
        blueprints: BlueprintCache,
        *,
        end_runs_on_failure: bool = True,
        mcp: McpTools | None = None,
        remote_agents: RemoteAgentTools | None = None,
        tenant_env: TenantEnvSettings | None = None,
        opening_hold: float = OPENING_HOLD,
    ) -> None:
        # Re-execution turns this off: it finds a model call's run from its stored opening.
        self._opening_hold = opening_hold
        self._resolver = BlueprintResolver(
            system, blueprints, mcp=mcp, remote_agents=remote_agents, tenant_env=tenant_env
        )
        # Re-execution turns this off: there, code that raises is a finding to report.
        self._end_runs_on_failure = end_runs_on_failure
        self._store = store
        self._system = system
        self._provider = provider
        self._threads = threads
        self._locks: KeyedLocks[tuple[str, str]] = KeyedLocks()
        # The model call in flight per thread, so a cancel can abort it.
        self.appends = ThreadAppends(store, threads)
        self.append = self.appends.append
        self.watched = self.appends.watched
        self.calls = ModelCalls(provider, self.append)
        self.code = CodeRuns(self, provider)
        self.trees = AgentTrees(store)

    @property
    def system(self) -> AgentSystem:
        return self._system

    async def dynamic_blueprints(self, state: ThreadState) -> dict[str, BlueprintSpec]:
        return await self._resolver.dynamic(state)

    async def read_events(self, state: ThreadState) -> list[RecordedEvent]:
        return await self._store.read(state.tenant_id, "thread", state.thread_id)

    async def reload(self, state: ThreadState) -> ThreadState:
        return await self._threads.load(state.tenant_id, state.thread_id)

    def lock(self, tenant_id: str, thread_id: str) -> asyncio.Lock:
        return self._locks.lock((tenant_id, thread_id))

    def driving(self, tenant_id: str, thread_id: str) -> bool:
        """Whether a drive of the thread holds its lock in this process right now."""
        return self._locks.held((tenant_id, thread_id))

    async def drive(self, tenant_id: str, thread_id: str) -> ThreadState:
        """Act on the thread until it waits (`drive_locked`), one task per thread here."""
        async with self.lock(tenant_id, thread_id):
            return await self.drive_locked(tenant_id, thread_id)

    async def drive_locked(
        self,
        tenant_id: str,
        thread_id: str,
        *,
        seen: int = 0,
        start: Awaitable[ThreadState | None] | None = None,
        decision: Decision | None = None,
    ) -> ThreadState:
        """Act on the thread until it waits. The caller holds the thread's lock (and, across
        processes, its lease). A failure that a retry cannot fix ends the active run with
        `run.error` naming it; a transient one (the broker did not answer) is raised, so the
        trigger is delivered again. `start` gives the state to begin from, as an append here
        just left it (None in it: read the thread); the first append after it expects its
        position, so what another writer added meanwhile is a conflict, and read then.
        `decision`: a command's events, stored by the first append (`decision.py`)."""
        state = await start if start is not None else None
        if state is None:
            state = await self._threads.load(tenant_id, thread_id)
        if state.position.stream_seq < seen:
            # `seen` is the stream sequence of the event that woke us; a replica that has
            # not caught up with it answered the read: ask the stream's leader instead.
            state = await self._threads.load(tenant_id, thread_id, from_leader=True)
        if not state.exists:
            raise UnknownThread(tenant_id, thread_id)
        if decision is not None and decision.behind(state):
            decision = None  # decided on a state the log moved past: the command decides again
        try:
            for _ in range(_HANDOVERS):
                code = self._system.code_agent_for(state.agent_type)
                if code is not None:
                    if decision is not None:
                        decision.missed()  # a code agent's handler decides on the log's state
                    state = await self.code.settle(state, code)
                else:
                    state = await self._settle(state, decision)
                decision = None
                # A queued run of another blueprint switched the thread to an agent the other
                # runner drives (a code agent's handler, or the model loop): it goes on there.
                if (self._system.code_agent_for(state.agent_type) is None) == (code is None):
                    return state
            return state
        except Exception as e:
            if decision is not None:
                decision.missed()
            if is_retried(e) or not self._end_runs_on_failure:
                raise
            where = e.log_fields() if isinstance(e, MiddlewareFailed) else {}
            log.exception("run failed", thread_id=thread_id, **where)
            return await self.end_run(tenant_id, thread_id, failure_kind(e), describe(e))

    async def _settle(self, state: ThreadState, decision: Decision | None = None) -> ThreadState:
        """Gather the decisions that need no I/O (local tools run here) and append them with
        the next thing that does (a model call, or waiting): one append a step. A command's
        `decision` opens the pending events, and goes with the first append or not at all."""
        pending: list[AnyEvent] = list(decision.events) if decision is not None else []
        # The state with `pending` applied, extended as decisions are added to the same
        # list on top of the same stored state, and built afresh when either is replaced.
        virtual, base, folded, counted = state, state, pending, 0
        # Where, in `pending`, a step begins whose opening waited for its answer (nothing of
        # it stored yet): what a conflict leaves standing ends there, for that answer was
        # made from a state another writer has moved since.
        held_from: int | None = None
        for _ in range(_MAX_ITERATIONS):
            if base is not state or folded is not pending or counted > len(pending):
                virtual, base, folded, counted = state, state, pending, 0
            if counted < len(pending):
                virtual = simulate(virtual, pending[counted:])
                counted = len(pending)
            action: Action = Wait()
            # Switched to a code agent (a queued run of it starts): what is decided is
            # stored, and its runner goes on from there (`drive_locked`).
            if self._system.code_agent_for(virtual.agent_type) is None:
                resolved = await self._resolver.resolve(virtual)
                tools = tools_now(
                    self._system,
                    resolved.blueprint,
                    virtual,
                    resolved.blueprints,
                    resolved.mcp_tools,
                )
                action = next_action(virtual, resolved.blueprint, tools)
            match action:
                case Append(events=decided):
                    events = await admit_spawns(self.trees, virtual, resolved.blueprint, decided)
                    ran = await run_local_calls(virtual, resolved.blueprint, tools, events)
                    given = await self._report_hooks(virtual, resolved, ran)
                    pending += await self._tool_hooks(virtual, resolved, given)
                case Wait():
                    if not pending:
                        return state
                    stored, appended = await self.append(state, pending, decision)
                    kept = appended or decision is not None
                    standing = pending[:held_from] if held_from is not None else pending
                    pending = [] if kept else still_ours(state, stored, standing)
                    state, decision, held_from = stored, None, None
                case CallModel(run_id=run_id, step=step):
                    # One step's opening at most waits for its answer in an append.
                    state, pending, decision, held_from = await self._model_step(
                        state, pending, virtual, resolved, run_id, step, decision, held_from
                    )
        raise LoopDidNotSettle(state.thread_id, _MAX_ITERATIONS)

    async def end_run(
        self, tenant_id: str, thread_id: str, kind: str, error: str, *, run_id: str | None = None
    ) -> ThreadState:
        """End the thread's active run (or the queued request it failed to start) with
        `run.error`, from the log as it is now; a run that ended meanwhile stays as it is.
        With `run_id`, only if that is the run to end."""
        for _ in range(CONFLICT_ATTEMPTS):
            state = await self._threads.load(tenant_id, thread_id)
            events = run_failed(state, kind, error, run_id=run_id)
            if not events:
                return state
            state, appended = await self.append(state, events)
            if appended:
                log.warning("run ended with an error", thread_id=thread_id, kind=kind)
                return state
        raise RuntimeError(f"thread {thread_id}: could not record the run's failure")

    async def _report_hooks(
        self, state: ThreadState, resolved: Resolved, events: Sequence[AnyEvent]
    ) -> list[AnyEvent]:
        """Children's reports given to the parent pass `on_child_report` first."""
        run = state.active_run
        ctx = self._context(state, resolved, run.run_id if run else "", run.step if run else 0)
        return await child_report_hooks(state, resolved.middleware, ctx, events)

    def _context(
        self, state: ThreadState, resolved: Resolved, run_id: str, step: int
    ) -> StepContext:
        return StepContext(
            state=thread_view(state),
            thread=state,
            blueprint=resolved.blueprint,
            run_id=run_id,
            step=step,
            registrable=self._system.registrable_for(resolved.blueprint),
        )

    async def _tool_hooks(
        self, state: ThreadState, resolved: Resolved, events: Sequence[AnyEvent]
    ) -> list[AnyEvent]:
        """Let middleware see tool starts, results, errors and resumes before they are
        appended; what a hook emits joins the same atomic append."""
        run = state.active_run
        if not resolved.middleware or run is None:
            return list(events)
        ctx = self._context(state, resolved, run.run_id, run.step)
        return await tool_event_hooks(state, resolved.middleware, ctx, events)

    async def _model_step(
        self,
        state: ThreadState,
        pending: list[AnyEvent],
        virtual: ThreadState,
        resolved: Resolved,
        run_id: str,
        step: int,
        decision: Decision | None,
        held_from: int | None,
    ) -> tuple[ThreadState, list[AnyEvent], Decision | None, int | None]:
        """Append `pending` with the step's opening events, call the model, and return what
        it answered as the new pending events (appended with the decisions that follow),
        and the command's `decision` if it is still among them. `virtual` is `state` with
        `pending` applied (`simulate`). Unless `pending` holds a held step already (from
        `held_from` on), the opening waits a moment for the answer, and an answer that came
        whole meanwhile joins it: then nothing is stored yet, `state` comes back as it
        was, and the last value says where the held step begins in the new pending events
        (None once anything was stored)."""
        state_before = state
        state = virtual
        ctx = self._context(state, resolved, run_id, step)
        opened = await model_step.opening(self._system, resolved, ctx, state, run_id, step)
        prelude, request = opened.prelude, opened.request
        # The model is asked while the opening is stored (`model_call`).
        opening = Opening(
            lambda: self.append(state_before, [*pending, *prelude], decision),
            self._opening_hold if held_from is None else 0.0,
        )
        calling = asyncio.ensure_future(
            self.calls.call(opening, (state.tenant_id, state.thread_id), request, run_id, step)
        )
        try:
            either: list[asyncio.Future[Any]] = [opening.future, calling]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            opening.withdraw()
            await discard(calling)
            raise
        if answered_whole(calling) and opening.withdraw():
            response, _ = calling.result()
            ctx.observe(simulate(virtual, prelude))
            closing = await model_step.closing(resolved, ctx, opened, response, run_id, step)
            return state_before, [*pending, *prelude, *closing], decision, len(pending)
        opening.release()
        try:
            state, appended = await opening.future
        except BaseException:
            await discard(calling)
            raise
        if not appended:
            await discard(calling)
            # Someone else moved the thread: decide again from there (keeping what the
            # last model call answered, if the run goes on where it was; a command's
            # decision is the command's to decide again).
            standing = pending[:held_from] if held_from is not None else pending
            kept = [] if decision is not None else still_ours(state_before, state, standing)
            return state, kept, None, None
        try:
            response, streamed = await calling
        except ModelAborted:
            return await self._threads.load(state.tenant_id, state.thread_id), [], None, None
        except ModelError as e:
            log.warning("model call failed", run_id=run_id, error=str(e))
            kind = e.kind or "model_error"
            return (
                state,
                [
                    AgentError(run_id=run_id, error=str(e), retryable=e.retryable),
                    RunError(run_id=run_id, error=f"model call failed: {e}", kind=kind),
                ],
                None,
                None,
            )
        state = streamed or state
        ctx.observe(state)
        closing = await model_step.closing(resolved, ctx, opened, response, run_id, step)
        return state, closing, None, None

    def abort_model_call(self, tenant_id: str, thread_id: str) -> bool:
        """Abort the thread's model call in flight, or its code agent's handler."""
        if self.code.abort(tenant_id, thread_id):
            return True
        return self.calls.abort(tenant_id, thread_id)
