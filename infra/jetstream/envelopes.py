"""Wrapping the events of one decision in their envelopes."""

from __future__ import annotations

from collections.abc import Sequence

from contracts.codec import event_type_of
from contracts.envelope import Envelope, utc_now
from contracts.events import AnyEvent
from contracts.ids import new_id
from contracts.subjects import Aggregate
from infra.jetstream.records import EventContext, Position


def new_envelopes(
    tenant_id: str,
    aggregate: Aggregate,
    aggregate_id: str,
    payloads: Sequence[AnyEvent],
    after: Position,
    context: EventContext | None = None,
    idempotency_key: str | None = None,
    trace: dict[str, str] | None = None,
) -> list[Envelope]:
    """Envelopes numbered on from `after`, sharing one time, context and trace."""
    ctx = context or EventContext()
    ts = utc_now()
    thread_id = ctx.thread_id
    if thread_id is None and aggregate == "thread":
        thread_id = aggregate_id
    return [
        Envelope(
            event_id=new_id(),
            tenant_id=tenant_id,
            aggregate=aggregate,
            aggregate_id=aggregate_id,
            seq=after.seq + i + 1,
            ts=ts,
            type=event_type_of(payload),
            version=type(payload).schema_version,
            agency_id=ctx.agency_id,
            thread_id=thread_id,
            run_id=getattr(payload, "run_id", None) or ctx.run_id,
            causation_id=ctx.causation_id,
            correlation_id=ctx.correlation_id,
            idempotency_key=idempotency_key,
            trace=trace or {},
            payload=payload,
        )
        for i, payload in enumerate(payloads)
    ]
