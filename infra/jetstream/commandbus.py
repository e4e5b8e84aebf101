"""Commands on a work-queue stream: sent once per idempotency key, handled by one worker.

A worker acknowledges a command once its handler returns. A handler that rejects a command
for good raises `CommandRejected`; `Defer` hands it back to be delivered again later; any
other failure is retried with backoff, and after `max_deliver` attempts the command goes to
the dead-letter stream with the last error. The loop is `infra/jetstream/worker.py`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Unpack

import structlog
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from opentelemetry import trace

from agency.contracts.codec import command_key_id, command_type_of, decode_command, encode_command
from agency.contracts.commands import AnyCommand, CommandEnvelope
from agency.contracts.envelope import utc_now
from agency.contracts.errors import CommandRejected, ContractError, StructuredError
from agency.contracts.ids import new_id, validate_token
from agency.contracts.partitions import EventLayout, command_aggregate
from agency.contracts.sealed import PayloadErased, installed_cipher
from agency.infra.jetstream.consumers import ensure_consumer
from agency.infra.jetstream.deadletter import DeadLetters
from agency.infra.jetstream.errors import StoreTimeout
from agency.infra.jetstream.outcomes import Ack, Erased, Outcome, Reject, Retry, Undecodable
from agency.infra.jetstream.tracing import context_from, current_carrier
from agency.infra.jetstream.worker import ConsumerWorker
from agency.infra.jetstream.worker_tuning import WorkerTuning

log = structlog.get_logger(__name__)
tracer = trace.get_tracer(__name__)


class Defer(StructuredError):
    """Not yet: deliver the command again in `seconds` (a durable timer on the broker)."""

    seconds: float
    message = "deferred by {seconds:.3f} s"


@dataclass(frozen=True, slots=True)
class SendResult:
    command_id: str
    stream_seq: int
    duplicate: bool


@dataclass(frozen=True, slots=True)
class Delivery:
    """What a handler knows of the message beyond the command itself."""

    subject: str
    stream_seq: int
    attempt: int


CommandHandler = Callable[[CommandEnvelope, Delivery], Awaitable[None]]


class CommandBus:
    """Sends commands, each to its aggregate's partition of the commands (`layout`)."""

    def __init__(
        self,
        nc: NATS,
        js: JetStreamContext,
        *,
        layout: EventLayout | None = None,
        timeout: float = 6.0,
    ) -> None:
        self._nc = nc
        self._js = js
        self._layout = layout or EventLayout()
        self._timeout = timeout

    async def send(
        self,
        tenant_id: str,
        command: AnyCommand,
        *,
        idempotency_key: str | None = None,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> SendResult:
        command_type = command_type_of(command)
        key = idempotency_key or new_id()
        envelope = CommandEnvelope(
            command_id=new_id(),
            tenant_id=validate_token("tenant id", tenant_id),
            idempotency_key=key,
            ts=utc_now(),
            type=command_type,
            version=type(command).schema_version,
            causation_id=causation_id,
            correlation_id=correlation_id,
            trace=current_carrier(),
            payload=command,
        )
        aggregate = command_aggregate(
            tenant_id, getattr(command, "thread_id", None), getattr(command, "agency_id", None)
        )
        subject = self._layout.command_subject(tenant_id, command.service, command.verb, aggregate)
        key_id = command_key_id(envelope)
        cipher = installed_cipher()
        if cipher is not None and key_id is not None:
            await cipher.prepare(envelope.tenant_id, key_id)
        headers = {"Nats-Msg-Id": f"{tenant_id}:{command_type}:{key}", **envelope.trace}
        with tracer.start_as_current_span(f"send {command_type}", kind=trace.SpanKind.PRODUCER):
            try:
                ack = await self._js.publish(
                    subject, encode_command(envelope), timeout=self._timeout, headers=headers
                )
            except (TimeoutError, NatsTimeoutError) as e:
                raise StoreTimeout(f"send of {command_type}", self._timeout) from e
        return SendResult(envelope.command_id, ack.seq, bool(ack.duplicate))


def _ordering_key(envelope: CommandEnvelope) -> tuple[str, str]:
    payload = envelope.payload
    for field in ("thread_id", "agency_id"):
        value = getattr(payload, field, None)
        if isinstance(value, str):
            return envelope.tenant_id, value
    return envelope.tenant_id, ""


class CommandWorker(ConsumerWorker[CommandEnvelope]):
    """Consumes one service's commands. Several workers may share the durable consumer.

    `batch` handlers run at once; up to `held` commands (fetched, not yet settled) may
    wait for them; one tenant's running handlers and held commands may be bounded
    (`tenant_running`, `tenant_held`; 0: no bound), a command beyond its tenant's held
    bound dead-lettered at once with the reason `tenant_backlog`. With commands in several
    partitions (`layout`), the durable is on each partition's stream, a loop each."""

    def __init__(
        self,
        js: JetStreamContext,
        service: str,
        handler: CommandHandler,
        *,
        layout: EventLayout,
        dead_letters: DeadLetters,
        max_deliver: int = 5,
        ack_wait: float = 30.0,
        batch: int = 64,
        backoff: tuple[float, ...] = (0.2, 1.0, 3.0, 10.0),
        **tuning: Unpack[WorkerTuning],
    ) -> None:
        service = validate_token("service", service)
        super().__init__(
            dead_letters=dead_letters,
            source_stream=layout.command_stream(0),
            durable=f"{service}-commands",
            concurrency=batch,
            ack_wait=ack_wait,
            max_deliver=max_deliver,
            backoff=backoff,
            **tuning,
        )
        self._js = js
        self._layout = layout
        self._service = service
        self._handler = handler

    def _partitions(self) -> int:
        return self._layout.partitions

    async def _subscribe(self, partition: int = 0) -> JetStreamContext.PullSubscription:
        config = ConsumerConfig(
            durable_name=self.durable,
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            filter_subject=self._layout.service_commands(self._service, partition),
            # One more than ours so the worker, not the server, dead-letters the last attempt.
            max_deliver=self._max_deliver + 1,
            ack_wait=self._ack_wait,
            # A deferred command (a run's watch, a child's deadline) stays pending on the
            # broker until it is due, one per active or parked run: a bound here would stop
            # every other command once that many wait. The worker's slots bound the work.
            max_ack_pending=-1,
        )
        return await ensure_consumer(
            self._js, config, stream=self._layout.command_stream(partition)
        )

    def _decode(self, msg: Msg) -> CommandEnvelope:
        try:
            envelope = decode_command(msg.data)
        except PayloadErased as e:
            raise Erased(str(e)) from e  # a command to a thread deleted since
        except ContractError as e:
            raise Undecodable(str(e)) from e
        # A tenant's credentials reach only its own subjects: the subject, not the body,
        # says whose command it is.
        if msg.subject.split(".")[1:2] != [envelope.tenant_id]:
            raise Undecodable(
                f"the envelope names tenant {envelope.tenant_id!r}, not the subject's"
            )
        return envelope

    def _lane(self, item: CommandEnvelope, msg: Msg) -> Hashable | None:
        """Commands of one aggregate are handled one at a time, in the order fetched;
        different aggregates' commands run side by side. A command waiting its aggregate's
        turn takes no handler slot, so one busy aggregate does not hold up the others."""
        return _ordering_key(item)

    async def _handle(self, item: CommandEnvelope, msg: Msg) -> Outcome[CommandEnvelope]:
        meta = msg.metadata
        delivery = Delivery(msg.subject, meta.sequence.stream, meta.num_delivered)
        return await self._handle_in_order(item, delivery)

    async def _handle_in_order(
        self, envelope: CommandEnvelope, delivery: Delivery
    ) -> Outcome[CommandEnvelope]:
        with (
            structlog.contextvars.bound_contextvars(
                tenant_id=envelope.tenant_id,
                command=envelope.type,
                command_id=envelope.command_id,
            ),
            tracer.start_as_current_span(
                f"handle {envelope.type}",
                context=context_from(envelope.trace),
                kind=trace.SpanKind.CONSUMER,
            ) as span,
        ):
            try:
                await self._handler(envelope, delivery)
            except CommandRejected as e:
                span.set_status(trace.StatusCode.ERROR, str(e))
                return Reject(e.reason, e.detail, envelope, settle="ack")
            except Defer as e:
                return Retry(e.seconds)
        return Ack()
