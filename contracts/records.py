"""What the event store hands out: recorded events and aggregate positions (`infra.jetstream`
stores and reads them; the domain folds them)."""

from __future__ import annotations

from dataclasses import dataclass

from agency.contracts.envelope import Envelope
from agency.contracts.events import Event


@dataclass(frozen=True, slots=True)
class Position:
    """Where an aggregate stands: its own last sequence and that event's stream sequence.

    `Position()` is "no event yet", the expectation for creating an aggregate.
    """

    seq: int = 0
    stream_seq: int = 0


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    envelope: Envelope
    stream_seq: int
    subject: str
    # The bytes as stored, so read models and APIs can serve an event without re-encoding.
    raw: bytes = b""

    @property
    def type(self) -> str:
        return self.envelope.type

    @property
    def seq(self) -> int:
        return self.envelope.seq

    @property
    def payload(self) -> Event:
        return self.envelope.payload

    @property
    def position(self) -> Position:
        return Position(self.envelope.seq, self.stream_seq)


@dataclass(frozen=True, slots=True)
class UndecodableEvent:
    """A message on an event subject that does not match any contract; `erased`: an
    event of a deleted thread, whose data key is destroyed (not a fault)."""

    stream_seq: int
    subject: str
    data: bytes
    reason: str
    erased: bool = False


@dataclass(frozen=True, slots=True)
class EventContext:
    """Envelope fields shared by every event of one decision."""

    agency_id: str | None = None
    thread_id: str | None = None
    run_id: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """`duplicate` means the broker had already stored this append (same message ids)."""

    position: Position
    events: tuple[RecordedEvent, ...]
    duplicate: bool = False
