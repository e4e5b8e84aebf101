"""A checksum of a projection's rows, to prove a rebuild gives the same read model."""

from __future__ import annotations

import hashlib

import asyncpg

from agency.projections.positions import quote_ident
from agency.projections.projection import Projection


async def table_checksum(conn: asyncpg.Connection, schema: str, table: str) -> str:
    name = f"{quote_ident(schema)}.{quote_ident(table)}"
    value = await conn.fetchval(
        f"SELECT md5(coalesce(string_agg(r::text, E'\\n' ORDER BY r::text), '')) || ':' || "
        f"count(*) FROM {name} AS r"
    )
    return str(value)


async def projection_checksum(
    conn: asyncpg.Connection, projection: Projection, schema: str = "public"
) -> str:
    digest = hashlib.sha256()
    for table in projection.tables:
        digest.update(f"{table}={await table_checksum(conn, schema, table)};".encode())
    return digest.hexdigest()
