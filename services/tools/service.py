"""The tools service: runs the tool calls the runtime requests, one result per call id.

Requests are `tool.requested` events on thread aggregates, consumed by one durable pull
consumer that any number of tools-service processes share. A request whose call already
has a result in its thread is acknowledged without running anything: that, not the broker's
duplicate window, is what keeps one result per call id however often a request arrives.
Results are appended at the thread's current position with the idempotency key
`tool-result:<call id>`, after checking the thread once more, so two deliveries racing each
other still store one result.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import nats.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import trace

from contracts.events import TOOL_RESULT_TYPES, AnyEvent, ToolError, ToolRequested, ToolStarted
from contracts.subjects import EVENTS_STREAM, events_of_type_filter
from infra.jetstream.connection import Bus
from infra.jetstream.consumers import TOOL_REQUESTS, ensure_consumer
from infra.jetstream.deadletter import DeadLetter
from infra.jetstream.errors import ConcurrencyError, StoreError
from infra.jetstream.eventstore import EventStore, record_from_js_msg
from infra.jetstream.records import EventContext, Position, RecordedEvent, UndecodableEvent
from infra.jetstream.tracing import context_from
from services.agents.system import AgentSystem
from services.agents.tools import ToolContext
from services.tools.executor import DEFAULT_BACKOFF, ToolResultEvent, describe, execute

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

DURABLE = TOOL_REQUESTS.name
REQUESTS = events_of_type_filter("tool.requested")

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


class ToolsService:
    """Consumes `tool.requested` events; several instances may share the durable consumer."""

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
        shutdown_grace: float = 5.0,
        poll_interval: float = 1.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self._bus = bus
        self._system = system
        self._concurrency = concurrency
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver
        self._redelivery_backoff = redelivery_backoff
        self._tool_backoff = tool_backoff
        self._shutdown_grace = shutdown_grace
        # How long one fetch waits for requests, so also how soon `stop` is noticed: a fetch
        # is never cancelled, as an abandoned pull request would take messages nobody reads.
        self._poll_interval = poll_interval
        # Copies of one request delivered together run one at a time in this process, so the
        # later ones find the first one's result instead of running the tool again.
        self._calls: dict[tuple[str, str, str], _CallSlot] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Process requests until `stop` is set, then let calls in flight finish within
        `shutdown_grace` seconds; the rest are cancelled and handed back to the broker."""
        sub = await self._subscribe()
        log.info("tools service started", concurrency=self._concurrency)
        in_flight: set[asyncio.Task[None]] = set()
        try:
            async with asyncio.TaskGroup() as tg:
                try:
                    while not stop.is_set():
                        free = self._concurrency - len(in_flight)
                        if free <= 0:
                            await asyncio.wait(
                                set(in_flight),
                                timeout=self._poll_interval,
                                return_when=asyncio.FIRST_COMPLETED,
                            )
                            continue
                        try:
                            msgs = await sub.fetch(free, timeout=self._poll_interval)
                        except TimeoutError:  # nats.errors.TimeoutError included
                            continue
                        except nats.errors.Error as e:
                            log.warning("tool request fetch failed, resubscribing", error=str(e))
                            sub = await self._resubscribe(sub, stop)
                            continue
                        for msg in msgs:
                            task = tg.create_task(self._process(msg))
                            in_flight.add(task)
                            task.add_done_callback(in_flight.discard)
                finally:
                    await self._wind_down(in_flight)
        finally:
            with contextlib.suppress(*_TRANSIENT):
                await asyncio.wait_for(sub.unsubscribe(), timeout=_SETTLE_TIMEOUT)
            log.info("tools service stopped")

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        config = TOOL_REQUESTS.config(
            ack_wait=self._ack_wait,
            # One more than ours so the service, not the server, dead-letters the last attempt.
            max_deliver=self._max_deliver + 1,
        )
        return await ensure_consumer(self._bus.js, config)

    async def _resubscribe(
        self, old: JetStreamContext.PullSubscription, stop: asyncio.Event
    ) -> JetStreamContext.PullSubscription:
        """A new subscription, retried until it works or `stop` is set: creating a consumer
        right after a cluster node is lost can fail for a few seconds."""
        with contextlib.suppress(*_TRANSIENT):
            await asyncio.wait_for(old.unsubscribe(), timeout=_SETTLE_TIMEOUT)
        delay = 0.5
        while not stop.is_set():
            await asyncio.sleep(delay)
            try:
                return await self._subscribe()
            except _TRANSIENT as e:
                log.warning("resubscribe failed, will retry", error=describe(e), delay=delay)
                delay = min(delay * 2, 5.0)
        return old

    async def _wind_down(self, in_flight: set[asyncio.Task[None]]) -> None:
        if not in_flight:
            return
        _, pending = await asyncio.wait(set(in_flight), timeout=self._shutdown_grace)
        for task in pending:
            task.cancel()
        if pending:
            log.info("calls cancelled at shutdown, handed back for redelivery", count=len(pending))

    # --- one message ------------------------------------------------------------------

    async def _process(self, msg: Msg) -> None:
        """Never raises but `CancelledError`: no message and no failure stops the service."""
        try:
            await self._process_one(msg)
        except asyncio.CancelledError:
            with contextlib.suppress(*_TRANSIENT):
                await asyncio.wait_for(msg.nak(), timeout=_SETTLE_TIMEOUT)
            raise
        except Exception as e:  # our own failure (NATS, the store, a bug): retry the message
            await self._failed(msg, e)

    async def _process_one(self, msg: Msg) -> None:
        recorded = record_from_js_msg(msg)
        if isinstance(recorded, UndecodableEvent):
            await self._reject(msg, "undecodable", recorded.reason)
            return
        problem = _misfit(recorded)
        if problem is not None:
            await self._reject(msg, "unexpected", problem)
            return
        env = recorded.envelope
        request = recorded.payload
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
            async with (
                self._heartbeat(msg),
                self._exclusive((env.tenant_id, env.aggregate_id, request.call.id)),
            ):
                await self._handle(recorded, request)
        await msg.ack()

    async def _handle(self, recorded: RecordedEvent, request: ToolRequested) -> None:
        env = recorded.envelope
        call_log = _CallLog(self._bus.store, recorded, request)
        try:
            prior_attempts = await call_log.load()
            tool = self._system.external_tool(request.call.name)
            context = ToolContext(
                tenant_id=env.tenant_id,
                agency_id=env.agency_id or "",
                thread_id=env.aggregate_id,
                run_id=request.run_id,
                call_id=request.call.id,
            )
            result = await execute(
                request,
                tool,
                context,
                on_attempt=call_log.started,
                prior_attempts=prior_attempts,
                backoff=self._tool_backoff,
            )
            await call_log.answer(result)
        except AlreadyAnswered:
            log.info("tool call already answered, not run again")
            return
        finally:
            await call_log.close()
        outcome = result.__struct_config__.tag
        trace.get_current_span().set_attribute("agency.tool.outcome", str(outcome))
        log.info("tool call answered", outcome=outcome, attempts=call_log.attempts)

    @contextlib.asynccontextmanager
    async def _heartbeat(self, msg: Msg) -> AsyncIterator[None]:
        """Tell the broker the message is being worked on, so a long call is not redelivered."""

        async def beat() -> None:
            while True:
                await asyncio.sleep(self._ack_wait / 3)
                try:
                    await msg.in_progress()
                except nats.errors.Error as e:
                    log.warning("progress heartbeat failed", error=str(e))

        task = asyncio.create_task(beat(), name="tools-heartbeat")
        try:
            yield
        finally:
            task.cancel()
            # `wait`, not `await task`: a cancellation of our own caller must still propagate.
            await asyncio.wait([task])

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

    async def _failed(self, msg: Msg, error: Exception) -> None:
        attempt = msg.metadata.num_delivered
        detail = describe(error)
        try:
            if attempt < self._max_deliver:
                delay = self._redelivery_backoff[
                    min(attempt - 1, len(self._redelivery_backoff) - 1)
                ]
                log.warning(
                    "tool request failed, will retry", attempt=attempt, delay=delay, error=detail
                )
                await msg.nak(delay=delay)
                return
            log.error("tool request failed for good", attempt=attempt, error=detail)
            await self._answer_for_good(msg, detail)
            await self._reject(msg, "exhausted", detail)
        except Exception as e:  # unsettled, it is redelivered after ack_wait: nothing is lost
            log.error("could not settle tool request", error=describe(e))

    async def _answer_for_good(self, msg: Msg, detail: str) -> None:
        """Best effort: a run waiting on this call gets an answer rather than waiting forever."""
        recorded = record_from_js_msg(msg)
        if isinstance(recorded, UndecodableEvent) or _misfit(recorded) is not None:
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
        except _TRANSIENT as e:
            log.error("could not record the failed call", error=describe(e))

    async def _reject(self, msg: Msg, reason: str, detail: str) -> None:
        meta = msg.metadata
        await self._bus.dead_letters.put(
            DeadLetter(
                source_stream=EVENTS_STREAM,
                subject=msg.subject,
                stream_seq=meta.sequence.stream,
                reason=reason,
                detail=detail,
                data=msg.data,
                consumer=DURABLE,
                deliveries=meta.num_delivered,
            )
        )
        await msg.term()


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
        self._context = EventContext(
            agency_id=env.agency_id,
            thread_id=env.aggregate_id,
            run_id=request.run_id,
            causation_id=env.event_id,
            correlation_id=env.correlation_id,
        )
        self._position = Position()
        self._started = 0
        self._held: ToolStarted | None = None
        self._flush: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def load(self) -> int:
        """Read the thread; the number of attempts already started for the call.

        Raises `AlreadyAnswered` when the call has a result.
        """
        await self._catch_up()
        return self._started

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

    async def _append(self, payloads: list[AnyEvent], key: str) -> None:
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
                # Another writer got there first: re-read (it may be this call's result).
                await self._catch_up()
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
    if len(parts) != 6 or (parts[1], parts[4]) != (env.tenant_id, env.aggregate_id):
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
