"""A tenant's API keys as the tenants read model and the usage table know them."""

from __future__ import annotations

from datetime import datetime
from functools import partial

import asyncpg

from agency.projections.queries import View
from agency.projections.rows import fetch_all, from_row


class KeyView(View, frozen=True, kw_only=True):
    key_id: str
    name: str
    issued_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


async def list_keys(conn: asyncpg.Connection, tenant: str) -> list[KeyView]:
    """Every key of the tenant, live ones first, then by issue time."""
    query = (
        "SELECT k.key_id, k.name, k.issued_at, k.revoked_at, u.last_used_at "
        "FROM api_keys k LEFT JOIN agency_api_key_usage u "
        "ON u.tenant_id = k.tenant_id AND u.key_id = k.key_id "
        "WHERE k.tenant_id = $1 "
        "ORDER BY k.revoked_at IS NOT NULL, k.issued_at, k.key_id"
    )
    return await fetch_all(conn, partial(from_row, KeyView), query, tenant)
