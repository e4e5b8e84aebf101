"""PostgreSQL: the connection pool, the migrations shipped in infra/migrations, the one
lock every schema change takes, and which errors are worth retrying."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import structlog

from agency.contracts.errors import StructuredError
from agency.infra.retry import RetryPolicy

log = structlog.get_logger(__name__)

# Any constant: every schema change (migrations, read-model tables) holds this transaction
# lock, so services started at the same instant change the schema one at a time
# (concurrent `CREATE TABLE IF NOT EXISTS` of one table can fail on PostgreSQL's catalog).
SCHEMA_LOCK = 0x4147454E

# Errors of the server's or the connection's state, not of the statement: a restart
# (admin shutdown, crash recovery, "cannot connect now"), a lost connection, a deadlock or
# serialization failure, a full disk, too many connections, a read-only standby after a
# failover, a statement timeout. The same statement later may succeed.
TRANSIENT: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # class 08
    asyncpg.TransactionRollbackError,  # class 40: deadlock_detected, serialization_failure
    asyncpg.InsufficientResourcesError,  # class 53: disk_full, out_of_memory, too_many_connections
    asyncpg.OperatorInterventionError,  # class 57: admin_shutdown, cannot_connect_now, ...
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.LockNotAvailableError,
    asyncpg.InterfaceError,  # "connection is closed"
    OSError,
    TimeoutError,
)


def is_transient(exc: BaseException) -> bool:
    """Whether the same PostgreSQL operation may succeed later; never an event's fault."""
    return isinstance(exc, TRANSIENT)


async def lock_schema(conn: asyncpg.Connection) -> None:
    """Hold the schema lock until the current transaction ends."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)


# Seconds a pooled connection may stay idle: a burst's extra connections (a PostgreSQL
# process each, a few MB apiece) end soon after it.
IDLE_LIFETIME = 30.0


async def create_pool(
    database_url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    setup: Callable[[asyncpg.Connection], Awaitable[None]] | None = None,
    session_state: bool = True,
    idle_lifetime: float = IDLE_LIFETIME,
) -> asyncpg.Pool:
    """A connection beyond `min_size` left idle for `idle_lifetime` seconds is closed (its
    server process ends, with the memory it held); one is opened again when needed.
    `setup` runs on every acquire. The pool resets the session on release; a pool whose
    users change nothing beyond their transactions (`session_state=False`: `SET LOCAL`,
    transaction-scoped locks) skips that round trip (an open transaction is still rolled
    back)."""
    pool = await asyncpg.create_pool(
        database_url,
        min_size=min_size,
        max_size=max_size,
        timeout=10,
        command_timeout=60,
        setup=setup,
        reset=None if session_state else _transaction_scoped,
        max_inactive_connection_lifetime=idle_lifetime,
    )
    assert pool is not None
    return pool


async def _transaction_scoped(conn: asyncpg.Connection) -> None:
    """Nothing to reset: the pool has rolled back any open transaction already."""


def migration_scripts() -> list[tuple[str, str]]:
    folder = files("agency.infra") / "migrations"
    return sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply the migrations not applied yet, in name order; returns the names applied."""
    applied: list[str] = []
    async with conn.transaction():
        await lock_schema(conn)
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


# Connecting and migrating while a server starts or restarts ("cannot connect now").
MIGRATE_RETRY = RetryPolicy(attempts=10, timeout=60.0, wait_initial=0.2, wait_max=5.0)


class DatabaseRefused(StructuredError):
    """PostgreSQL refused us for a reason no retry fixes: who we are or what we may do.
    `url` is the database's URL as it may be shown (`shown_url`)."""

    url: str
    problem: str
    hint: str
    message = "PostgreSQL at {url} refused: {problem}; {hint}"


def shown_url(url: str) -> str:
    """A database URL as it may be shown: the user, never the password."""
    parts = urlsplit(url)
    who = f"{parts.username}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{who}{parts.hostname or ''}{port}", parts.path, "", ""))


async def migrate_database(database_url: str, *, retry: RetryPolicy = MIGRATE_RETRY) -> list[str]:
    """Connect and `migrate`, retrying transient failures; returns the names applied.
    A refused login or privilege is `DatabaseRefused`, saying what to fix."""

    async def once() -> list[str]:
        conn = await asyncpg.connect(database_url, timeout=10)
        try:
            return await migrate(conn)
        finally:
            await conn.close(timeout=5)

    try:
        return await retry.call(is_transient, once)
    except asyncpg.InvalidAuthorizationSpecificationError as e:  # class 28: who we are
        raise DatabaseRefused(
            shown_url(database_url), str(e), "check the user and password of DATABASE_URL"
        ) from e
    except (asyncpg.InsufficientPrivilegeError, asyncpg.RaiseError) as e:
        hint = getattr(e, "hint", None) or "the role of DATABASE_URL needs more privileges"
        raise DatabaseRefused(shown_url(database_url), str(e.args[0]), hint) from e
