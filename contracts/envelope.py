"""The envelope every event travels in."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from agency.contracts.events import AnyEvent
from agency.contracts.subjects import Aggregate


class EnvelopeFields(msgspec.Struct, frozen=True, kw_only=True):
    """The fields of an envelope but its payload (`Envelope`'s docstring says what each is);
    each kind of envelope adds the payload as it reads it."""

    event_id: str
    tenant_id: str
    aggregate: Aggregate
    aggregate_id: str
    seq: int
    ts: datetime
    type: str
    version: int
    agency_id: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None
    idempotency_key: str | None = None
    trace: dict[str, str] = {}


class Envelope(EnvelopeFields, frozen=True, kw_only=True):
    """One stored fact.

    `seq` is the aggregate's own sequence (1, 2, 3, … with no gaps); the stream sequence is
    the broker's and lives on `RecordedEvent`. `correlation_id` is the root thread of a
    subagent tree; `causation_id` the event or command this one follows from. `trace` is a
    W3C trace-context carrier (`traceparent`, `tracestate`). `idempotency_key` is the key of the
    command that produced the event, so a repeat is detected from the log itself long after
    the broker's duplicate window has passed.
    """

    payload: AnyEvent


class WireEnvelope(EnvelopeFields, frozen=True, kw_only=True):
    """The envelope with its payload left undecoded, for routing and upcasting."""

    payload: msgspec.Raw


def utc_now() -> datetime:
    return datetime.now(UTC)
