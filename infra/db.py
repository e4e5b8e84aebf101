"""PostgreSQL: the connection pool and the migrations shipped in infra/migrations."""

from __future__ import annotations

from importlib.resources import files

import asyncpg
import structlog

log = structlog.get_logger(__name__)

# Any constant; it makes concurrent starts apply migrations one at a time.
_MIGRATION_LOCK = 0x4147454E


async def create_pool(database_url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        database_url, min_size=min_size, max_size=max_size, timeout=10, command_timeout=60
    )
    assert pool is not None
    return pool


def migration_scripts() -> list[tuple[str, str]]:
    folder = files("infra") / "migrations"
    return sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply the migrations not applied yet, in name order; returns the names applied."""
    applied: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS agency_schema_migrations ("
            " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r["name"] for r in await conn.fetch("SELECT name FROM agency_schema_migrations")}
        for name, sql in migration_scripts():
            if name in done:
                continue
            await conn.execute(sql)
            await conn.execute("INSERT INTO agency_schema_migrations (name) VALUES ($1)", name)
            applied.append(name)
    if applied:
        log.info("migrations applied", names=applied)
    return applied
