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
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError

from contracts.commands import ApproveToolCalls, CancelRun, CommandEnvelope, InvokeThread
from contracts.subjects import EVENTS_STREAM, events_of_type_filter, tenant_of
from infra.jetstream.commandbus import CommandRejected, CommandWorker, Delivery
from infra.jetstream.connection import Bus
from infra.jetstream.consumers import RUNTIME_TRIGGERS, ensure_consumer
from infra.jetstream.deadletter import DeadLetter
from infra.jetstream.errors import ConcurrencyError
from infra.jetstream.records import EventContext
from services.agents.system import AgentSystem
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
        for _ in range(8):
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

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        config = RUNTIME_TRIGGERS.config(
            ack_wait=self._ack_wait,
            max_deliver=self._max_deliver,
            max_ack_pending=self._concurrency * 4,
        )
        config.durable_name = self._consumer
        return await ensure_consumer(self._bus.js, config)

    async def run_triggers(self, stop: asyncio.Event) -> None:
        sub = await self._subscribe()
        slots = asyncio.Semaphore(self._concurrency)
        try:
            async with asyncio.TaskGroup() as tg:
                while not stop.is_set():
                    try:
                        msgs = await sub.fetch(min(self._concurrency, 64), timeout=1.0)
                    except (NatsTimeoutError, TimeoutError):
                        continue
                    except JetStreamError as e:
                        log.warning("trigger fetch failed, resubscribing", error=str(e))
                        await asyncio.sleep(0.5)
                        sub = await self._subscribe()
                        continue
                    for msg in msgs:
                        await slots.acquire()
                        task = tg.create_task(self._on_trigger(msg))
                        task.add_done_callback(lambda _: slots.release())
        finally:
            # A pull subscription left to the connection's drain would wait on its queue.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sub.unsubscribe(), timeout=2.0)

    async def _on_trigger(self, msg: Msg) -> None:
        try:
            tenant, thread = tenant_of(msg.subject), thread_of(msg.subject)
        except (ValueError, IndexError):
            await msg.term()
            return
        heartbeat = asyncio.create_task(self._keep_alive(msg))
        try:
            with structlog.contextvars.bound_contextvars(tenant_id=tenant, thread_id=thread):
                await self.driver.drive(tenant, thread)
        except UnknownThread as e:
            await self._dead_letter(msg, "unknown_thread", str(e))
            await msg.term()
            return
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await msg.nak()
            raise
        except Exception as e:  # retried through redelivery, then dead-lettered
            log.exception("drive failed", tenant_id=tenant, thread_id=thread)
            if msg.metadata.num_delivered >= self._max_deliver:
                await self._dead_letter(msg, "exhausted", f"{type(e).__name__}: {e}")
                await msg.term()
            else:
                await msg.nak(delay=min(2**msg.metadata.num_delivered * 0.2, 10))
            return
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
        await msg.ack()

    async def _keep_alive(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self._ack_wait / 3)
            with contextlib.suppress(Exception):
                await msg.in_progress()

    async def _dead_letter(self, msg: Msg, reason: str, detail: str) -> None:
        await self._bus.dead_letters.put(
            DeadLetter(
                source_stream=EVENTS_STREAM,
                subject=msg.subject,
                stream_seq=msg.metadata.sequence.stream,
                reason=reason,
                detail=detail,
                data=msg.data,
                consumer=self._consumer,
                deliveries=msg.metadata.num_delivered,
            )
        )

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
