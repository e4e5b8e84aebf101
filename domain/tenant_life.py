"""Whether a tenant exists, from its registry history: created, and not deleted."""

from __future__ import annotations

from agency.contracts.records import RecordedEvent


def is_live_tenant(history: list[RecordedEvent]) -> bool:
    """Created and not deleted (`tenant.deleted`, docs/data.md)."""
    types = {e.type for e in history}
    return "tenant.created" in types and "tenant.deleted" not in types
