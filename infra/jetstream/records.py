"""The event store's records, defined with the contracts (`contracts/records.py`) so the
domain folds them without the store."""

from agency.contracts.records import (
    AppendResult,
    EventContext,
    Position,
    RecordedEvent,
    UndecodableEvent,
)

__all__ = ["AppendResult", "EventContext", "Position", "RecordedEvent", "UndecodableEvent"]
