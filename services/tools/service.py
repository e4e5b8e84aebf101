"""The tools service: runs the tool calls the runtime requests, one result per call id.

Requests are `tool.requested` events on thread aggregates, consumed by one durable pull
consumer that any number of tools-service processes share. A request whose call already
has a result in its thread is acknowledged without running anything: that, not the broker's
duplicate window, is what keeps one result per call id however often a request arrives.
Results are appended at the thread's current position with the idempotency key
`tool-result:<call id>`, after checking the thread once more, so two deliveries racing each
other still store one result.

A call whose run has ended (canceled, or ended any other way) is not run: the runtime
answered it when the run ended (if it did not, the service answers it with an error). A
call running when its run is canceled is stopped (`services/tools/cancels.py`) and its
result is never appended after the cancel.

A request naming an MCP tool (`tool.requested.mcp`) is run through the process's MCP
sessions (`services/mcpclient/`), under the same timeout, retries and one result per call.
A request naming a remote A2A agent (`tool.requested.remote_agent`) sends its message
(`services/a2aclient/`) in the remote conversation of the thread's latest answer from that
agent, and its `tool.output` names the conversation the agent answered in
(`remote_context_id`), which the thread's next call to the agent continues.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Unpack

import msgspec
import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import trace

from agency.contracts.events import (
    TOOL_RESULT_TYPES,
    AnyEvent,
    McpToolRef,
    MessageAppended,
    RemoteAgent,
    ToolError,
    ToolOutput,
    ToolRequested,
    ToolStarted,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.subjects import EVENTS_STREAM
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import TOOL_REQUESTS, ensure_consumer
from agency.infra.jetstream.errors import ConcurrencyError, StoreError
from agency.infra.jetstream.eventstore import EventStore
from agency.infra.jetstream.eventworker import EventConsumer
from agency.infra.jetstream.outcomes import Ack, Outcome, Reject
from agency.infra.jetstream.records import EventContext, Position, RecordedEvent
from agency.infra.jetstream.tracing import context_from
from agency.infra.jetstream.worker_tuning import WorkerTuning
from agency.services.agents.system import AgentSystem
from agency.services.agents.tools import Tool, ToolContext
from agency.services.tool_execution.executor import (
    DEFAULT_BACKOFF,
    ToolResultEvent,
    describe,
    execute,
)
from agency.services.tools.cancels import RunCanceledWhileRunning, RunCancels
from agency.services.workflows.context_tools import WorkflowContextTools

if TYPE_CHECKING:
    from agency.services.a2aclient import Conversation, RemoteCards
    from agency.services.mcpclient import McpSessions

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

DURABLE = TOOL_REQUESTS.name

# Appends lose to the runtime writing the same thread (model deltas, other calls' results);
# each retry re-reads first, so this only bounds a pathological storm.
# A call answering within this many seconds appends its start with its result.
START_GRACE = 0.1
_MAX_CONFLICTS = 50
_SETTLE_TIMEOUT = 2.0

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


class ToolsService(EventConsumer):
    """Consumes `tool.requested` events; several instances may share the durable consumer.

    The loop (free-slot fetches, heartbeats, retries, graceful shutdown) is the one every
    consumer shares (`infra/jetstream/worker.py`). A request that fails for good is
    answered with a `tool.error` before it is dead-lettered, so its run does not wait on it.
    """

    def __init__(
        self,
        bus: Bus,
        system: AgentSystem,
        *,
        concurrency: int = 8,
        ack_wait: float = 30.0,
        max_deliver: int = 5,
        redelivery_backoff: tuple[float, ...] = (0.5, 2.0, 5.0, 10.0),
        tool_backoff: tuple[float, ...] = DEFAULT_BACKOFF,
        **tuning: Unpack[WorkerTuning],
    ) -> None:
        super().__init__(
            dead_letters=bus.dead_letters,
            source_stream=EVENTS_STREAM,
            durable=DURABLE,
            concurrency=concurrency,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            backoff=redelivery_backoff,
            on_dead_letter=self._answer_for_good,
            **tuning,
        )
        self._bus = bus
        self._spec = TOOL_REQUESTS
        self._system = system
        self._workflow_tools = WorkflowContextTools(bus.store)
        self._tool_backoff = tool_backoff
        # Copies of one request delivered together run one at a time in this process, so the
        # later ones find the first one's result instead of running the tool again.
        self._calls: dict[tuple[str, str, str], _CallSlot] = {}
        self._cancels = RunCancels(bus)
        # MCP sessions of this process, made by the first MCP call (`_mcp_tool`).
        self._mcp: McpSessions | None = None
        # Remote agents' cards, kept for this process's calls (`_remote_agent_tool`).
        self._cards: RemoteCards | None = None

    async def run(self, stop: asyncio.Event) -> None:
        """The shared consumer loop, with the `run.canceled` listener alongside."""
        await self._cancels.start()
        try:
            await super().run(stop)
        finally:
            await self._cancels.stop()
            if self._mcp is not None:
                await self._mcp.aclose()  # stops stdio servers' processes too

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        config = TOOL_REQUESTS.config(
            ack_wait=self._ack_wait,
            # One more than ours so the service, not the server, dead-letters the last attempt.
            max_deliver=self._max_deliver + 1,
        )
        return await ensure_consumer(self._bus.js, config)

    # --- one message ------------------------------------------------------------------

    async def _handle(self, item: RecordedEvent, msg: Msg) -> Outcome[RecordedEvent]:
        problem = _misfit(item)
        if problem is not None:
            # No hook: a request that is not one has no run to answer.
            return Reject("unexpected", problem)
        env = item.envelope
        request = item.payload
        assert isinstance(request, ToolRequested)  # checked by _misfit
        with (
            structlog.contextvars.bound_contextvars(
                tenant_id=env.tenant_id,
                thread_id=env.aggregate_id,
                run_id=request.run_id,
                call_id=request.call.id,
                tool=request.call.name,
            ),
            tracer.start_as_current_span(
                "handle tool.requested",
                context=context_from(env.trace),
                kind=trace.SpanKind.CONSUMER,
                attributes={
                    "agency.tenant_id": env.tenant_id,
                    "agency.thread_id": env.aggregate_id,
                    "agency.tool.name": request.call.name,
                    "agency.tool.call_id": request.call.id,
                },
            ),
        ):
            async with self._exclusive((env.tenant_id, env.aggregate_id, request.call.id)):
                await self._run_call(item, request)
        return Ack()

    async def _run_call(self, recorded: RecordedEvent, request: ToolRequested) -> None:
        env = recorded.envelope
        call_log = _CallLog(self._bus.store, recorded, request)
        try:
            prior_attempts = await call_log.load()
            conversation = None
            tool: Tool | None
            if request.remote_agent is not None:
                tool, conversation = self._remote_agent_tool(
                    request.remote_agent,
                    call_log.remote_conversation(request.call.name, request.remote_agent.url),
                )
            elif request.mcp is not None:
                tool = self._mcp_tool(request.mcp)
            else:
                tool = self._system.external_tool(request.call.name)
            context = ToolContext.of_request(
                env.tenant_id, env.agency_id, env.aggregate_id, request, self._workflow_tools
            )
            result = await self._cancels.run(
                (env.tenant_id, env.aggregate_id, request.run_id),
                execute(
                    request,
                    tool,
                    context,
                    on_attempt=call_log.started,
                    prior_attempts=prior_attempts,
                    backoff=self._tool_backoff,
                ),
            )
            if conversation is not None and isinstance(result, ToolOutput):
                result = msgspec.structs.replace(
                    result,
                    remote_context_id=conversation.context_id,
                    remote_task_id=conversation.task_id,
                )
            await call_log.answer(result)
        except RunCanceledWhileRunning:
            log.info("tool call stopped: its run was canceled")
            return
        except RunEnded as e:
            if not e.answered:
                await call_log.answer_unrun(f"Not run: run {e.run_id} ended ({e.how}) first.")
            log.info("tool call not run: its run has ended", run_end=e.how)
            return
        except AlreadyAnswered:
            log.info("tool call already answered, not run again")
            return
        finally:
            await call_log.close()
        outcome = result.__struct_config__.tag
        trace.get_current_span().set_attribute("agency.tool.outcome", str(outcome))
        log.info("tool call answered", outcome=outcome, attempts=call_log.attempts)

    def _mcp_tool(self, ref: McpToolRef) -> Tool:
        # Imported on first use: the MCP SDK takes a second to import, which the CLI and a
        # system without MCP servers never need.
        from agency.services.mcpclient import McpSessions, mcp_tool

        if self._mcp is None:
            self._mcp = McpSessions()
        return mcp_tool(self._mcp, ref)

    def _remote_agent_tool(
        self, agent: RemoteAgent, where: tuple[str, str]
    ) -> tuple[Tool, Conversation]:
        # Imported on first use, as the MCP SDK: a system without remote agents never pays
        # for the A2A SDK's import.
        from agency.services.a2aclient import Conversation, RemoteCards, remote_agent_tool

        if self._cards is None:
            self._cards = RemoteCards()
        conversation = Conversation(*where)
        return remote_agent_tool(self._cards, agent, conversation), conversation

    @contextlib.asynccontextmanager
    async def _exclusive(self, key: tuple[str, str, str]) -> AsyncIterator[None]:
        slot = self._calls.setdefault(key, _CallSlot())
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._calls[key]

    # --- failures ---------------------------------------------------------------------

    async def _answer_for_good(self, recorded: RecordedEvent, reason: str, detail: str) -> None:
        """A run waiting on this call gets an answer rather than waiting forever."""
        if _misfit(recorded) is not None:
            return
        request = recorded.payload
        assert isinstance(request, ToolRequested)  # checked by _misfit
        error = ToolError(
            run_id=request.run_id,
            tool_call_id=request.call.id,
            tool_name=request.call.name,
            error=f"the tools service could not run this call ({detail})",
            attempts=0,
        )
        call_log = _CallLog(self._bus.store, recorded, request)
        try:
            await call_log.load()
            await call_log.answer(error)
        except AlreadyAnswered:
            return


@dataclass(slots=True)
class _CallSlot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class _CallLog:
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


def _misfit(recorded: RecordedEvent) -> str | None:
    """Why a decoded message cannot be a request to act on, or None."""
    env = recorded.envelope
    if not isinstance(recorded.payload, ToolRequested):
        return f"expected a tool.requested event, got {env.type!r}"
    # The subject is what the broker authorises per tenant; an envelope naming another
    # tenant or thread than its subject must not make us write into that one.
    parts = recorded.subject.split(".")
    if len(parts) != 5 or (parts[1], parts[4]) != (env.tenant_id, env.aggregate_id):
        return (
            f"envelope of tenant {env.tenant_id!r}, thread {env.aggregate_id!r} "
            f"does not match its subject {recorded.subject!r}"
        )
    if env.aggregate != "thread":
        return f"tool requests belong to threads, not to a {env.aggregate!r} aggregate"
    return None


async def run_tools_service(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    system: AgentSystem,
    *,
    ack_wait: float = 30.0,
) -> None:
    """Run the tools service on a connection of its own until `stop` is set."""
    # The tools service keeps no read model; the URL is taken so every service starts alike.
    del database_url
    async with Bus(nats_url, name="agency-tools") as bus:
        await ToolsService(bus, system, ack_wait=ack_wait).run(stop)
