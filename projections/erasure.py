"""A deleted thread's rows leave every read model (docs/data.md).

`thread.deleted` names the threads of the deleted tree. Whatever projection sees it deletes
their rows from each of its tables that has them: rows keyed by `thread_id` or
`child_thread_id`, and rows of the thread aggregates (`aggregate`, `aggregate_id`). It also
makes sure the tree's data keys are destroyed: the deleter destroys them when it deletes,
and this finishes the deletion of a deleter that stopped between the tombstones and the
keys. Only at the root's tombstone, the tree's last: the deleter writes the children's
first and still reads the root's last event (sealed with the tree's key) to append after
it, so the key must outlive the children's tombstones.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from agency.contracts.events import ThreadDeleted
from agency.infra.jetstream.records import RecordedEvent
from agency.infra.keystore import current_cipher
from agency.projections.positions import quote_ident
from agency.projections.projection import Projection

DELETED = "thread.deleted"
_THREAD_COLUMNS = ("thread_id", "child_thread_id")


def tombstones(events: Sequence[RecordedEvent]) -> list[RecordedEvent]:
    return [e for e in events if e.type == DELETED]


def tree_of(event: RecordedEvent) -> list[str]:
    payload = event.payload
    assert isinstance(payload, ThreadDeleted)
    return sorted({event.envelope.aggregate_id, payload.root_thread_id, *payload.tree})


async def erase_threads(
    conn: asyncpg.Connection, projection: Projection, deleted: Sequence[RecordedEvent]
) -> None:
    """Inside the projection's transaction (its schema on the search path)."""
    for event in deleted:
        payload = event.payload
        assert isinstance(payload, ThreadDeleted)
        tenant, tree = event.envelope.tenant_id, tree_of(event)
        cipher = current_cipher()
        if cipher is not None and event.envelope.aggregate_id == payload.root_thread_id:
            for key_id in tree:
                await cipher.destroy(tenant, key_id)
        for table in projection.tables:
            for statement in await _deletes(conn, table):
                await conn.execute(statement, tenant, tree)


async def _deletes(conn: asyncpg.Connection, table: str) -> list[str]:
    columns = {
        r["column_name"]
        for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = $1",
            table,
        )
    }
    if "tenant_id" not in columns:
        return []
    name = quote_ident(table)
    statements = [
        f"DELETE FROM {name} WHERE tenant_id = $1 AND {column} = ANY($2::text[])"
        for column in _THREAD_COLUMNS
        if column in columns
    ]
    if {"aggregate", "aggregate_id"} <= columns:
        statements.append(
            f"DELETE FROM {name} WHERE tenant_id = $1 AND aggregate = 'thread' "
            "AND aggregate_id = ANY($2::text[])"
        )
    return statements
