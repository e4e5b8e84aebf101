"""Which of a tenant's API keys are live, folded from its registry history."""

from __future__ import annotations

from agency.contracts.events import ApiKeyIssued, ApiKeyRevoked
from agency.contracts.records import RecordedEvent


def live_keys(history: list[RecordedEvent]) -> dict[str, str]:
    """The tenant's unrevoked keys: key id → name."""
    keys: dict[str, str] = {}
    for e in history:
        match e.payload:
            case ApiKeyIssued(key_id=key_id, name=name):
                keys[key_id] = name
            case ApiKeyRevoked(key_id=key_id):
                keys.pop(key_id, None)
    return keys
