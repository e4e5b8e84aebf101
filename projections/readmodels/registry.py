"""Tenants and their API keys, agencies, and the agencies' dynamic blueprints."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import (
    AgencyCreated,
    AgencyDeleted,
    AgencyRetentionSet,
    ApiKeyIssued,
    ApiKeyRevoked,
    BlueprintDeleted,
    BlueprintSaved,
    TenantCreated,
    TenantDeleted,
    TenantRetentionSet,
)
from agency.projections.statements import Statement, Table, statement_projection, upsert

# --- tenants ---------------------------------------------------------------------------

TENANTS_DDL = """
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id  text        PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    tenant_id  text        NOT NULL,
    key_id     text        NOT NULL,
    key_hash   text        NOT NULL,
    issued_at  timestamptz NOT NULL,
    revoked_at timestamptz,
    name       text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, key_id)
);
ALTER TABLE api_keys ADD COLUMN IF NOT EXISTS name text NOT NULL DEFAULT '';
-- How long the tenant's threads are kept, in seconds (null: the operator's default).
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS retention_seconds double precision;
-- Authentication knows the key, not yet the tenant.
CREATE INDEX IF NOT EXISTS api_keys_by_key ON api_keys (key_id);
"""

_TENANT = upsert(
    "tenants", ("tenant_id", "name", "created_at"), ("tenant_id",), kept=("created_at",)
)
_KEY_ISSUED = (
    "INSERT INTO api_keys (tenant_id, key_id, key_hash, issued_at, name) "
    "VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (tenant_id, key_id) DO UPDATE SET key_hash = EXCLUDED.key_hash, "
    "issued_at = EXCLUDED.issued_at, name = EXCLUDED.name, revoked_at = NULL"
)
_TENANT_RETENTION = "UPDATE tenants SET retention_seconds = $2 WHERE tenant_id = $1"
# A deleted tenant's row goes, its settings with it; its keys' rows stay, revoked.
_TENANT_DELETED = "DELETE FROM tenants WHERE tenant_id = $1"
_KEY_REVOKED = (
    "UPDATE api_keys SET revoked_at = $3 "
    "WHERE tenant_id = $1 AND key_id = $2 AND revoked_at IS NULL"
)


def _tenant_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case TenantCreated(name=name):
                yield _TENANT, (env.tenant_id, name, env.ts)
            case ApiKeyIssued(key_id=key_id, key_hash=key_hash, name=name):
                yield _KEY_ISSUED, (env.tenant_id, key_id, key_hash, env.ts, name)
            case ApiKeyRevoked(key_id=key_id):
                yield _KEY_REVOKED, (env.tenant_id, key_id, env.ts)
            case TenantRetentionSet(seconds=seconds):
                yield _TENANT_RETENTION, (env.tenant_id, seconds)
            case TenantDeleted():
                yield _TENANT_DELETED, (env.tenant_id,)


_TENANT_EVENTS = {
    "tenant.created",
    "tenant.api_key_issued",
    "tenant.api_key_revoked",
    "tenant.retention_set",
    "tenant.deleted",
}
TENANTS = statement_projection(
    "tenants", TENANTS_DDL, _tenant_statements, _TENANT_EVENTS, tables=("tenants", "api_keys")
)

# --- agencies --------------------------------------------------------------------------

AGENCY_TABLE = Table(
    "agencies",
    {
        "tenant_id": "text NOT NULL",
        "agency_id": "text NOT NULL",
        "name": "text NOT NULL",
        "metadata": "jsonb NOT NULL",
        "created_at": "timestamptz NOT NULL",
    },
    ("tenant_id", "agency_id"),
    kept=("created_at",),
    then="""
CREATE INDEX IF NOT EXISTS agencies_by_created ON agencies (tenant_id, created_at, agency_id);
-- How long the agency's threads are kept, in seconds (null: the tenant's).
ALTER TABLE agencies ADD COLUMN IF NOT EXISTS retention_seconds double precision;
""",
)
_AGENCY = AGENCY_TABLE.upsert
_AGENCY_DELETED = AGENCY_TABLE.delete()
_AGENCY_RETENTION = (
    "UPDATE agencies SET retention_seconds = $3 WHERE tenant_id = $1 AND agency_id = $2"
)


def _agency_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case AgencyCreated(name=name, metadata=metadata):
                encoded = msgspec.json.encode(metadata).decode()
                yield _AGENCY, (env.tenant_id, env.aggregate_id, name, encoded, env.ts)
            case AgencyRetentionSet(seconds=seconds):
                yield _AGENCY_RETENTION, (env.tenant_id, env.aggregate_id, seconds)
            case AgencyDeleted():
                yield _AGENCY_DELETED, (env.tenant_id, env.aggregate_id)


AGENCIES = statement_projection(
    "agencies",
    AGENCY_TABLE.ddl,
    _agency_statements,
    {"agency.created", "agency.retention_set", "agency.deleted"},
    aggregate="agency",
)

# --- blueprints ------------------------------------------------------------------------

BLUEPRINT_TABLE = Table(
    "blueprints",
    {
        "tenant_id": "text NOT NULL",
        "agency_id": "text NOT NULL",
        "name": "text NOT NULL",
        "spec": "jsonb NOT NULL",
        "revision": "integer NOT NULL",
        "updated_at": "timestamptz NOT NULL",
    },
    ("tenant_id", "agency_id", "name"),
)
_BLUEPRINT_SAVED = BLUEPRINT_TABLE.upsert
_BLUEPRINT_DELETED = BLUEPRINT_TABLE.delete()


def _blueprint_statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case BlueprintSaved(blueprint=spec, revision=revision):
                spec_json = msgspec.json.encode(spec).decode()
                args = (env.tenant_id, env.aggregate_id, spec.name, spec_json, revision, env.ts)
                yield _BLUEPRINT_SAVED, args
            case BlueprintDeleted(name=name):
                yield _BLUEPRINT_DELETED, (env.tenant_id, env.aggregate_id, name)


BLUEPRINTS = statement_projection(
    "blueprints",
    BLUEPRINT_TABLE.ddl,
    _blueprint_statements,
    {"blueprint.saved", "blueprint.deleted"},
    aggregate="agency",
)
