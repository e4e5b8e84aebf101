"""Typed reads of the tenants, agencies and blueprints read models, for the HTTP query routes.

Every function takes the caller's tenant and filters on it (`projections.queries`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import asyncpg
import msgspec

from agency.contracts.events import BlueprintSpec
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    SideConfig,
    TreeLimits,
)
from agency.contracts.upcasters import stored_blueprint_spec
from agency.projections.queries import View
from agency.projections.rows import fetch_all


class AgencyView(View, frozen=True, kw_only=True):
    id: str
    name: str
    metadata: dict[str, str]
    created_at: datetime


class TenantView(View, frozen=True, kw_only=True):
    id: str
    name: str
    created_at: datetime


class StoredBlueprint(View, frozen=True, kw_only=True):
    spec: BlueprintSpec
    revision: int
    updated_at: datetime


BlueprintSource = Literal["static", "dynamic"]


class BlueprintView(View, frozen=True, kw_only=True):
    name: str
    description: str
    prompt: str
    model: str
    tags: tuple[str, ...]
    config: BlueprintConfig
    type: str
    source: BlueprintSource
    revision: int | None = None
    updated_at: datetime | None = None
    title: str = ""
    icon: str = ""
    env: dict[str, str] = {}
    hooks: tuple[str, ...] = ()
    package_name: str = ""
    version: str = ""
    author: str = ""
    license: str = ""
    side_a: SideConfig | None = None
    side_b: SideConfig | None = None
    max_session_turns: int | None = None
    expose_as_tool: bool = False
    tool_description: str = ""
    init_user_message_property: str | None = None
    init_attachments_property: str | None = None
    limits: TreeLimits | None = None
    metadata: dict[str, Any] = {}


async def tenant_for_key(conn: asyncpg.Connection, key_id: str, key_hash: str) -> str | None:
    """The tenant of an unrevoked API key, given its id and the sha256 hex of the whole key."""
    tenant = await conn.fetchval(
        "SELECT tenant_id FROM api_keys WHERE key_id = $1 AND key_hash = $2 AND revoked_at IS NULL",
        key_id,
        key_hash,
    )
    return str(tenant) if tenant is not None else None


def _agency(r: asyncpg.Record) -> AgencyView:
    return AgencyView(
        id=r["agency_id"],
        name=r["name"],
        metadata=msgspec.json.decode(r["metadata"], type=dict[str, str]),
        created_at=r["created_at"],
    )


_AGENCY_COLUMNS = "agency_id, name, metadata::text AS metadata, created_at"


async def list_tenants(conn: asyncpg.Connection) -> list[TenantView]:
    """Every tenant, for the admin (a deleted tenant's row is gone)."""
    rows = await conn.fetch(
        "SELECT tenant_id, name, created_at FROM tenants ORDER BY created_at, tenant_id"
    )
    return [TenantView(id=r["tenant_id"], name=r["name"], created_at=r["created_at"]) for r in rows]


async def list_agencies(conn: asyncpg.Connection, tenant: str) -> list[AgencyView]:
    query = (
        f"SELECT {_AGENCY_COLUMNS} FROM agencies WHERE tenant_id = $1 "
        "ORDER BY created_at, agency_id"
    )
    return await fetch_all(conn, _agency, query, tenant)


async def get_agency(conn: asyncpg.Connection, tenant: str, agency_id: str) -> AgencyView | None:
    row = await conn.fetchrow(
        f"SELECT {_AGENCY_COLUMNS} FROM agencies WHERE tenant_id = $1 AND agency_id = $2",
        tenant,
        agency_id,
    )
    return _agency(row) if row is not None else None


def _stored_blueprint(r: asyncpg.Record) -> StoredBlueprint:
    return StoredBlueprint(
        spec=stored_blueprint_spec(r["spec"]), revision=r["revision"], updated_at=r["updated_at"]
    )


async def list_blueprints(
    conn: asyncpg.Connection, tenant: str, agency_id: str
) -> list[StoredBlueprint]:
    """The agency's dynamic blueprints (saved through the API), by name."""
    query = (
        "SELECT spec::text AS spec, revision, updated_at FROM blueprints "
        "WHERE tenant_id = $1 AND agency_id = $2 ORDER BY name"
    )
    return await fetch_all(conn, _stored_blueprint, query, tenant, agency_id)


async def get_blueprint(
    conn: asyncpg.Connection, tenant: str, agency_id: str, name: str
) -> StoredBlueprint | None:
    row = await conn.fetchrow(
        "SELECT spec::text AS spec, revision, updated_at FROM blueprints "
        "WHERE tenant_id = $1 AND agency_id = $2 AND name = $3",
        tenant,
        agency_id,
        name,
    )
    return _stored_blueprint(row) if row is not None else None


def _blueprint_view(
    spec: BlueprintSpec, source: BlueprintSource, stored: StoredBlueprint | None = None
) -> BlueprintView:
    # The sides are a dual-AI session's; an ai_human blueprint has none to show.
    shown = (
        spec if spec.type == "dual_ai" else msgspec.structs.replace(spec, side_a=None, side_b=None)
    )
    return BlueprintView(
        **msgspec.structs.asdict(shown),
        source=source,
        revision=stored.revision if stored else None,
        updated_at=stored.updated_at if stored else None,
    )


def blueprint_view(
    static: Mapping[str, BlueprintSpec], stored: StoredBlueprint | None, name: str
) -> BlueprintView | None:
    """The agency's dynamic blueprint `name`, else the static one, else None."""
    if stored is not None:
        return _blueprint_view(stored.spec, "dynamic", stored)
    spec = static.get(name)
    return _blueprint_view(spec, "static") if spec is not None else None


def merge_blueprints(
    static: Mapping[str, BlueprintSpec], dynamic: Sequence[StoredBlueprint]
) -> list[BlueprintView]:
    """Static blueprints overridden by the agency's dynamic ones of the same name, by name."""
    merged = {name: _blueprint_view(spec, "static") for name, spec in static.items()}
    for stored in dynamic:
        merged[stored.spec.name] = _blueprint_view(stored.spec, "dynamic", stored)
    return [merged[name] for name in sorted(merged)]
