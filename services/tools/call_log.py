"""One tool call's events in its thread, as the tools service appends them: its start
(`tool.started`) and its one result, each at the thread's current position, never once the
thread holds a result for the call or the call's run has ended (`services/tools/service.py`).
"""

from __future__ import annotations

import asyncio
import contextlib

import nats.errors
import structlog

from agency.contracts.events import (
    TOOL_RESULT_TYPES,
    AnyEvent,
    MessageAppended,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.infra.jetstream.errors import ConcurrencyError, StoreError
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.services.tool_execution.executor import ToolResultEvent, describe

log = structlog.get_logger(__name__)

# A call answering within this many seconds appends its start with its result.
START_GRACE = 0.1
# Appends lose to the runtime writing the same thread (model deltas, other calls' results);
# each retry re-reads first, so this only bounds a pathological storm.
_MAX_CONFLICTS = 50

# NATS and store failures: the message is redelivered, so they are never fatal here.
_TRANSIENT = (StoreError, nats.errors.Error, TimeoutError)


class AlreadyAnswered(Exception):
    """The call has a result in its thread: nothing more to run or append."""


class RunEnded(AlreadyAnswered):
    """The call's run has ended: the call is not run, and no result of it is appended."""

    def __init__(self, run_id: str, how: str, answered: bool) -> None:
        self.run_id = run_id
        self.how = how
        self.answered = answered  # the runtime gave the call a tool message when it ended
        super().__init__(f"run {run_id} ended ({how})")


class CallLog:
    """One call's events in its thread: appended at the thread's current position, and never
    once the thread holds a result for the call.

    A `tool.started` is held back for `START_GRACE` seconds: a call that answers sooner
    appends its start and its result together, one append instead of two. A longer call
    has its start recorded while it runs, so a crash mid-call still counts the attempt.
    """

    def __init__(self, store: EventStore, recorded: RecordedEvent, request: ToolRequested) -> None:
        env = recorded.envelope
        self._store = store
        self._tenant = env.tenant_id
        self._thread = env.aggregate_id
        self._call_id = request.call.id
        self._run_id = request.run_id
        self._request = request
        self._answered_by_message = False
        self._context = EventContext(
            agency_id=env.agency_id,
            thread_id=env.aggregate_id,
            run_id=request.run_id,
            causation_id=env.event_id,
            correlation_id=env.correlation_id,
        )
        self._position = Position()
        self._started = 0
        # The remote agent each call of the thread went to (its card's URL), and where the
        # thread's latest answer from each agent (tool name and URL) left its conversation.
        self._remote_urls: dict[str, str] = {}
        self._remote_conversations: dict[tuple[str, str], tuple[str, str]] = {}
        self._held: ToolStarted | None = None
        self._flush: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def load(self) -> int:
        """Read the thread; the number of attempts already started for the call.

        Raises `AlreadyAnswered` when the call has a result.
        """
        await self._catch_up()
        return self._started

    def remote_conversation(self, tool_name: str, url: str) -> tuple[str, str]:
        """Where the thread's latest answer from the remote agent called as `tool_name`,
        at `url`, left its conversation: its `contextId` and the task that asked for input
        (each "" when none; read by `load`). An agent whose URL changed starts afresh."""
        return self._remote_conversations.get((tool_name, url), ("", ""))

    @property
    def attempts(self) -> int:
        """Attempts started so far, by any delivery of the request."""
        return self._started

    async def started(self, event: ToolStarted) -> None:
        async with self._lock:
            await self._release_held()
            self._held = event
            self._started = max(self._started, event.attempt)
        self._flush = asyncio.create_task(self._flush_later(), name="tool-started-flush")

    async def _flush_later(self) -> None:
        await asyncio.sleep(START_GRACE)
        async with self._lock:
            try:
                await self._release_held()
            except (AlreadyAnswered, StoreError, *_TRANSIENT) as e:
                # The result's append settles the call; the start is only bookkeeping.
                log.warning("could not record a tool start", error=describe(e))

    async def close(self) -> None:
        """Stop a pending start flush (the call ended, whichever way)."""
        flush, self._flush = self._flush, None
        if flush is not None:
            flush.cancel()
            await asyncio.wait([flush])

    async def _release_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            await self._append([held], f"tool-started:{self._call_id}:{held.attempt}")

    async def answer(self, result: ToolResultEvent) -> None:
        await self.close()
        async with self._lock:
            held, self._held = self._held, None
            events: list[AnyEvent] = [held, result] if held is not None else [result]
            await self._append(events, f"tool-result:{self._call_id}")

    async def answer_unrun(self, reason: str) -> None:
        """Answer a call never run because its run ended, unless anything answered it."""
        await self.close()
        error = ToolError(
            run_id=self._run_id,
            tool_call_id=self._call_id,
            tool_name=self._request.call.name,
            error=reason,
            attempts=0,
        )
        async with self._lock:
            self._held = None
            with contextlib.suppress(AlreadyAnswered):
                await self._append([error], f"tool-result:{self._call_id}", run_may_end=True)

    async def _append(
        self, payloads: list[AnyEvent], key: str, *, run_may_end: bool = False
    ) -> None:
        for conflicts in range(_MAX_CONFLICTS):
            try:
                appended = await self._store.append(
                    self._tenant,
                    "thread",
                    self._thread,
                    payloads,
                    expected=self._position,
                    context=self._context,
                    idempotency_key=key,
                )
            except ConcurrencyError:
                # Another writer got there first: re-read (it may be this call's result, or
                # the end of its run).
                try:
                    await self._catch_up()
                except RunEnded:
                    if not run_may_end:
                        raise
                await asyncio.sleep(min(0.05, 0.002 * conflicts))
                continue
            if appended.events:
                self._position = appended.position
            return
        raise StoreError(
            f"gave up appending {key} to thread {self._thread} after {_MAX_CONFLICTS} "
            "concurrent appends won"
        )

    async def _catch_up(self) -> None:
        newer, position = await self._store.read_positioned(
            self._tenant, "thread", self._thread, after=self._position
        )
        for event in newer:
            if event.type in TOOL_RESULT_TYPES and _call_id_of(event) == self._call_id:
                raise AlreadyAnswered(self._call_id)
            payload = event.payload
            if isinstance(payload, ToolRequested) and payload.remote_agent is not None:
                self._remote_urls[payload.call.id] = payload.remote_agent.url
            if isinstance(payload, ToolOutput) and payload.remote_context_id:
                url = self._remote_urls.get(payload.tool_call_id, "")
                self._remote_conversations[(payload.tool_name, url)] = (
                    payload.remote_context_id,
                    payload.remote_task_id,
                )
            if isinstance(payload, MessageAppended) and payload.message.tool_call_id == (
                self._call_id
            ):
                self._answered_by_message = True
            if event.type in RUN_TERMINAL_TYPES and event.envelope.run_id == self._run_id:
                self._position = position
                raise RunEnded(self._run_id, event.type, self._answered_by_message)
            if isinstance(event.payload, ToolStarted) and event.payload.tool_call_id == (
                self._call_id
            ):
                self._started = max(self._started, event.payload.attempt)
        self._position = position


def _call_id_of(event: RecordedEvent) -> str | None:
    call_id = getattr(event.payload, "tool_call_id", None)
    return call_id if isinstance(call_id, str) else None
