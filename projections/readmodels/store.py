"""`store_items`: each tenant's store items as last put, from `store.item_put` and
`store.item_deleted`. `expires_at` is the put's time plus its TTL: reads leave expired
items out, so a rebuild from the log gives the same rows at any time."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta

import msgspec

from agency.contracts.envelope import Envelope
from agency.contracts.events import StoreItemDeleted, StoreItemPut
from agency.projections.statements import Statement, statement_projection

DDL = """
CREATE TABLE IF NOT EXISTS store_items (
    tenant_id  text        NOT NULL,
    namespace  text[]      NOT NULL,
    key        text        NOT NULL,
    value      jsonb       NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    expires_at timestamptz,
    embedding  float8[],
    PRIMARY KEY (tenant_id, namespace, key)
);
CREATE INDEX IF NOT EXISTS store_items_by_update ON store_items (tenant_id, updated_at);
"""

_PUT = (
    "INSERT INTO store_items (tenant_id, namespace, key, value, created_at, updated_at, "
    "expires_at, embedding) VALUES ($1, $2, $3, $4, $5, $5, $6, $7) "
    "ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET value = EXCLUDED.value, "
    "updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at, "
    "embedding = EXCLUDED.embedding"
)
_DELETE = "DELETE FROM store_items WHERE tenant_id = $1 AND namespace = $2 AND key = $3"


def _statements(envelopes: Sequence[Envelope]) -> Iterable[Statement]:
    for env in envelopes:
        match env.payload:
            case StoreItemPut(
                namespace=ns, key=key, value=value, ttl_minutes=ttl, embedding=embedding
            ):
                expires = env.ts + timedelta(minutes=ttl) if ttl is not None else None
                value_json = msgspec.json.encode(value).decode()
                vector = list(embedding) if embedding is not None else None
                yield _PUT, (env.tenant_id, list(ns), key, value_json, env.ts, expires, vector)
            case StoreItemDeleted(namespace=ns, key=key):
                yield _DELETE, (env.tenant_id, list(ns), key)


PROJECTION = statement_projection(
    "store_items", DDL, _statements, {"store.item_put", "store.item_deleted"}
)
