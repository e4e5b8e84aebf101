"""The runtime service: runtime commands in, thread loops driven by events.

- Commands (`invoke`, `approve`, `cancel`) are decided against the thread's folded state
  and appended; they never wait for a model.
- Trigger events (`request.accepted`, `hitl.resume`, tool results, `run.canceled`) are
  consumed from a durable consumer shared by every runtime worker; each drives its thread
  until it waits again, and is acknowledged only then. A worker killed mid-run leaves its
  trigger unacknowledged, so another (or the restarted one) picks the run up from the log.
- Every worker also listens to `run.canceled` on plain NATS to abort a model call it has in
  flight for that thread.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from nats.aio.msg import Msg

from contracts.commands import ApproveToolCalls, CancelRun, CommandEnvelope, InvokeThread
from contracts.subjects import events_of_type_filter, tenant_of
from infra.jetstream.commandbus import CommandRejected, CommandWorker, Delivery
from infra.jetstream.connection import Bus
from infra.jetstream.consumers import RUNTIME_TRIGGERS
from infra.jetstream.errors import ConcurrencyError
from infra.jetstream.eventworker import EventWorker, PermanentFailure
from infra.jetstream.records import EventContext, RecordedEvent
from services.agents.system import AgentSystem
from services.common.decide import CONFLICT_ATTEMPTS, conflict_pause
from services.llm.provider import Provider
from services.runtime import commands
from services.runtime.cache import BlueprintCache, ThreadCache
from services.runtime.loop import ThreadDriver, UnknownThread

log = structlog.get_logger(__name__)

TRIGGER_CONSUMER = RUNTIME_TRIGGERS.name


def thread_of(subject: str) -> str:
    # tenant.<t>.evt.thread.<thread_id>.<type>
    return subject.split(".")[4]


class RuntimeService:
    def __init__(
        self,
        bus: Bus,
        system: AgentSystem,
        provider: Provider,
        *,
        concurrency: int = 256,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
        consumer: str = TRIGGER_CONSUMER,
    ) -> None:
        self._bus = bus
        self._consumer = consumer
        self._threads = ThreadCache(bus.store)
        self.blueprints = BlueprintCache(bus.store)
        self.driver = ThreadDriver(bus.store, system, provider, self._threads, self.blueprints)
        self._concurrency = concurrency
        self._background: asyncio.TaskGroup | None = None
        self._eager: set[asyncio.Task[None]] = set()
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver

    def attach(self, background: asyncio.TaskGroup) -> None:
        """The task group that eager drives run in (and end with)."""
        self._background = background

    # --- commands -----------------------------------------------------------------

    async def handle_command(self, envelope: CommandEnvelope, delivery: Delivery) -> None:
        payload = envelope.payload
        match payload:
            case InvokeThread() | ApproveToolCalls() | CancelRun():
                thread_id = payload.thread_id
            case other:
                raise CommandRejected(
                    "wrong_service", f"{type(other).__name__} is not a runtime command"
                )
        tenant = envelope.tenant_id
        for attempt in range(CONFLICT_ATTEMPTS):
            state = await self._threads.load(tenant, thread_id)
            if not state.exists:
                # The create command may not be applied yet: retried with backoff, then
                # dead-lettered as exhausted.
                raise UnknownThread(tenant, thread_id)
            if state.agency_id != payload.agency_id:
                raise CommandRejected(
                    "unknown_thread", f"thread {thread_id} is not in agency {payload.agency_id}"
                )
            match payload:
                case InvokeThread():
                    events = commands.invoke(state, payload, envelope.idempotency_key)
                case ApproveToolCalls():
                    events = commands.approve(state, payload)
                case CancelRun():
                    events = commands.cancel(state, payload)
            if not events:
                return
            try:
                await self._bus.store.append(
                    tenant,
                    "thread",
                    thread_id,
                    list(events),
                    expected=state.position,
                    context=EventContext(
                        agency_id=state.agency_id,
                        thread_id=thread_id,
                        correlation_id=state.correlation_id,
                        causation_id=envelope.command_id,
                    ),
                    idempotency_key=envelope.idempotency_key,
                )
            except ConcurrencyError:
                # A busy thread (a streaming model call appends every 50 ms) can win a few
                # times in a row: back off a little, with jitter, and decide again.
                await asyncio.sleep(conflict_pause(attempt))
                continue
            self._drive_soon(tenant, thread_id)
            return
        raise RuntimeError(f"thread {thread_id}: too many concurrent writers")

    def _drive_soon(self, tenant: str, thread_id: str) -> None:
        """Start driving the thread now, without waiting for the trigger event to come back
        through the consumer: it still comes, and is a no-op or a retry if this fails."""
        if self._background is None:
            return
        task = self._background.create_task(self._eager_drive(tenant, thread_id))
        task.add_done_callback(self._eager.discard)
        self._eager.add(task)

    async def _eager_drive(self, tenant: str, thread_id: str) -> None:
        try:
            with structlog.contextvars.bound_contextvars(tenant_id=tenant, thread_id=thread_id):
                await self.driver.drive(tenant, thread_id)
        except Exception:  # the trigger's delivery retries and dead-letters properly
            log.warning("eager drive failed; the trigger will retry", exc_info=True)

    # --- triggers -----------------------------------------------------------------

    async def run_triggers(self, stop: asyncio.Event) -> None:
        worker = EventWorker(
            self._bus,
            RUNTIME_TRIGGERS,
            self._on_trigger,
            durable=self._consumer,
            concurrency=self._concurrency,
            ack_wait=self._ack_wait,
            max_deliver=self._max_deliver,
        )
        await worker.run(stop)

    async def _on_trigger(self, event: RecordedEvent) -> None:
        """Any trigger means: drive its thread until it waits again."""
        env = event.envelope
        try:
            await self.driver.drive(env.tenant_id, env.aggregate_id)
        except UnknownThread as e:
            raise PermanentFailure("unknown_thread", str(e)) from e

    # --- cancel of in-flight model calls ---------------------------------------------

    async def run_cancel_listener(self, stop: asyncio.Event) -> None:
        async def on_cancel(msg: Msg) -> None:
            tenant, thread = tenant_of(msg.subject), thread_of(msg.subject)
            if self.driver.abort_model_call(tenant, thread):
                log.info("model call aborted by cancel", tenant_id=tenant, thread_id=thread)

        sub = await self._bus.nc.subscribe(events_of_type_filter("run.canceled"), cb=on_cancel)
        try:
            await stop.wait()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def run_runtime(
    nats_url: str,
    database_url: str,
    stop: asyncio.Event,
    system: AgentSystem,
    provider: Provider,
    *,
    ack_wait: float = 30.0,
) -> None:
    async with Bus(nats_url, name="agency-runtime") as bus:
        service = RuntimeService(bus, system, provider, ack_wait=ack_wait)
        await service.blueprints.watch(bus.nc)
        worker = CommandWorker(
            bus.js, "runtime", service.handle_command, dead_letters=bus.dead_letters
        )
        async with asyncio.TaskGroup() as tg:
            service.attach(tg)
            tg.create_task(worker.run(stop))
            tg.create_task(service.run_triggers(stop))
            tg.create_task(service.run_cancel_listener(stop))
