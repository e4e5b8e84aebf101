"""A durable consumer of chosen event types, shared by every process of a service.

Each event is handled once by one worker (explicit acks); a failing handler is retried
with backoff through redelivery and dead-lettered after `max_deliver` attempts; an event
that does not decode is dead-lettered at once. The service never stops on bad input, nor
on a broker that is briefly away (see `infra/jetstream/worker.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Unpack

import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import trace

from agency.contracts.errors import StructuredError
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.consumers import DurableSpec, ensure_consumer
from agency.infra.jetstream.decoding import event_type_of, record_from_js_msg
from agency.infra.jetstream.outcomes import Ack, Erased, Outcome, Reject, Undecodable
from agency.infra.jetstream.records import RecordedEvent, UndecodableEvent
from agency.infra.jetstream.settling import DeadLetterHook
from agency.infra.jetstream.tracing import context_from
from agency.infra.jetstream.worker import ConsumerWorker
from agency.infra.jetstream.worker_tuning import WorkerTuning

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)

EventHandler = Callable[[RecordedEvent], Awaitable[None]]
# The lane of an event: handlers of one lane run one at a time (see `lanes.py`).
LaneOf = Callable[[RecordedEvent], Hashable | None]

# Redelivery delays after the 1st, 2nd, … failed attempt.
EVENT_BACKOFF = (0.4, 0.8, 1.6, 3.2, 6.4, 10.0)


class PermanentFailure(StructuredError):
    """The event can never be handled (e.g. its thread does not exist): dead-letter it now."""

    reason: str
    detail: str
    message = "{reason}: {detail}"


class EventConsumer(ConsumerWorker[RecordedEvent]):
    """A worker over the stored events of `spec`: a message that is no event is
    undecodable; an event of a type the spec does not want is acked unhandled, told by its
    type header (or, for a message without one, by its decoded envelope)."""

    _spec: DurableSpec
    _bus: Bus

    def _partitions(self) -> int:
        return self._bus.layout.partitions

    async def _subscribe(self, partition: int = 0) -> JetStreamContext.PullSubscription:
        config = self._spec.config(
            ack_wait=self._ack_wait,
            # One more than ours so the worker, not the server, dead-letters the last attempt.
            max_deliver=self._max_deliver + 1,
            max_ack_pending=self._max_ack_pending(),
            layout=self._bus.layout,
            partition=partition,
        )
        config.durable_name = self.durable
        return await ensure_consumer(self._bus.js, config, self._bus.layout.stream(partition))

    def _max_ack_pending(self) -> int:
        return 1024

    def _wants(self, msg: Msg) -> bool:
        event_type = event_type_of(msg)
        return event_type is None or self._spec.wants(event_type)

    def _wants_item(self, item: RecordedEvent) -> bool:
        return self._spec.wants(item.type)

    def _decode(self, msg: Msg) -> RecordedEvent:
        recorded = record_from_js_msg(msg)
        if isinstance(recorded, UndecodableEvent):
            if recorded.erased:
                raise Erased(recorded.reason)
            raise Undecodable(recorded.reason)
        return recorded


class EventWorker(EventConsumer):
    """`on_dead_letter(event, reason, detail)` is awaited before an event is dead-lettered
    because its handler failed for good (`exhausted`) or raised `PermanentFailure`; its own
    failures are retried, logged, and the event is dead-lettered anyway.

    With `lane`, events of one lane are handled one at a time, `concurrency` at once, while
    up to `held` wait their lane's turn; `tenant_running` and `tenant_held` bound one
    tenant's share of both (0: no bound)."""

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
        on_dead_letter: DeadLetterHook[RecordedEvent] | None = None,
        lane: LaneOf | None = None,
        **tuning: Unpack[WorkerTuning],
    ) -> None:
        super().__init__(
            dead_letters=bus.dead_letters,
            source_stream=bus.layout.stream(0),
            durable=durable or spec.name,
            concurrency=concurrency,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            backoff=EVENT_BACKOFF,
            on_dead_letter=on_dead_letter,
            **tuning,
        )
        self._lane_of = lane
        self._bus = bus
        self._spec = spec
        self._handler = handler

    def _max_ack_pending(self) -> int:
        return max(self._concurrency * 4, self._held)

    def _lane(self, item: RecordedEvent, msg: Msg) -> Hashable | None:
        return None if self._lane_of is None else self._lane_of(item)

    async def _handle(self, item: RecordedEvent, msg: Msg) -> Outcome[RecordedEvent]:
        env = item.envelope
        with (
            structlog.contextvars.bound_contextvars(
                tenant_id=env.tenant_id, thread_id=env.aggregate_id, event=env.type
            ),
            # The producer's trace goes on: one trace follows a run across services.
            tracer.start_as_current_span(
                f"{self.durable} {env.type}",
                context=context_from(env.trace),
                kind=trace.SpanKind.CONSUMER,
            ),
        ):
            try:
                await self._handler(item)
            except PermanentFailure as e:
                trace.get_current_span().set_status(trace.StatusCode.ERROR, str(e))
                return Reject(e.reason, e.detail, item)
        return Ack()
