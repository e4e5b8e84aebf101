"""A durable consumer of chosen event types, shared by every process of a service.

Each event is handled once by one worker (explicit acks); a failing handler is retried
with backoff through redelivery and dead-lettered after `max_deliver` attempts; an event
that does not decode is dead-lettered at once. The service never stops on bad input.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import Error as JetStreamError
from opentelemetry import trace

from contracts.subjects import EVENTS_STREAM
from infra.jetstream.connection import Bus
from infra.jetstream.consumers import DurableSpec, ensure_consumer
from infra.jetstream.deadletter import DeadLetter
from infra.jetstream.eventstore import record_from_js_msg
from infra.jetstream.records import RecordedEvent, UndecodableEvent
from infra.jetstream.tracing import context_from

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

EventHandler = Callable[[RecordedEvent], Awaitable[None]]


class PermanentFailure(Exception):
    """The event can never be handled (e.g. its thread does not exist): dead-letter it now."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


class EventWorker:
    def __init__(
        self,
        bus: Bus,
        spec: DurableSpec,
        handler: EventHandler,
        *,
        durable: str | None = None,
        concurrency: int = 16,
        ack_wait: float = 30.0,
        max_deliver: int = 10,
    ) -> None:
        self._bus = bus
        self._spec = spec
        self._durable = durable or spec.name
        self._handler = handler
        self._concurrency = concurrency
        self._ack_wait = ack_wait
        self._max_deliver = max_deliver

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        config = self._spec.config(
            ack_wait=self._ack_wait,
            # One more than ours so the worker, not the server, dead-letters the last attempt.
            max_deliver=self._max_deliver + 1,
            max_ack_pending=self._concurrency * 4,
        )
        config.durable_name = self._durable
        return await ensure_consumer(self._bus.js, config)

    async def run(self, stop: asyncio.Event) -> None:
        sub = await self._subscribe()
        slots = asyncio.Semaphore(self._concurrency)
        try:
            async with asyncio.TaskGroup() as tg:
                while not stop.is_set():
                    try:
                        msgs = await sub.fetch(self._concurrency, timeout=1.0)
                    except (NatsTimeoutError, TimeoutError):
                        continue
                    except JetStreamError as e:
                        log.warning(
                            "event fetch failed, resubscribing", durable=self._durable, error=str(e)
                        )
                        await asyncio.sleep(0.5)
                        sub = await self._subscribe()
                        continue
                    for msg in msgs:
                        await slots.acquire()
                        task = tg.create_task(self._process(msg))
                        task.add_done_callback(lambda _: slots.release())
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(sub.unsubscribe(), timeout=2.0)

    async def _process(self, msg: Msg) -> None:
        recorded = record_from_js_msg(msg)
        if isinstance(recorded, UndecodableEvent):
            await self._dead_letter(msg, "undecodable", recorded.reason)
            await msg.term()
            return
        env = recorded.envelope
        attempt = msg.metadata.num_delivered
        heartbeat = asyncio.create_task(self._keep_alive(msg))
        try:
            with (
                structlog.contextvars.bound_contextvars(
                    tenant_id=env.tenant_id, thread_id=env.aggregate_id, event=env.type
                ),
                # The producer's trace goes on: one trace follows a run across services.
                tracer.start_as_current_span(
                    f"{self._durable} {env.type}",
                    context=context_from(env.trace),
                    kind=trace.SpanKind.CONSUMER,
                ),
            ):
                await self._handler(recorded)
        except PermanentFailure as e:
            await self._dead_letter(msg, e.reason, e.detail)
            await msg.term()
            return
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await msg.nak()
            raise
        except Exception as e:  # retried through redelivery, then dead-lettered
            log.exception("event handler failed", durable=self._durable, attempt=attempt)
            if attempt >= self._max_deliver:
                await self._dead_letter(msg, "exhausted", f"{type(e).__name__}: {e}")
                await msg.term()
            else:
                await msg.nak(delay=min(0.2 * 2**attempt, 10.0))
            return
        finally:
            heartbeat.cancel()
            await asyncio.wait([heartbeat])
        await msg.ack()

    async def _keep_alive(self, msg: Msg) -> None:
        """A long handler (a run's model calls) is not redelivered while it works."""
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
                consumer=self._durable,
                deliveries=msg.metadata.num_delivered,
            )
        )
