"""Row-level security: a role that sees only the rows of the tenant its session names.

The projector applies events as `agency_projector`, which may read and write every row of
the read models and their checkpoints and nothing else; the tables' owner (migrations, DDL,
rebuilds) does the rest. The API's tenant requests read as `agency_reader`, whose policy on
every read-model table is `tenant_id = current_setting('app.tenant_id')`. A session that
names no tenant sees no row at all, so a query that forgot its tenant filter returns nothing
instead of everyone's.
"""

from __future__ import annotations

from collections.abc import Iterable

import asyncpg

READER = "agency_reader"
# The role the projector applies events as: it writes the read models and their
# checkpoints, and nothing else (no DDL, no other table).
PROJECTOR = "agency_projector"
SETTING = "app.tenant_id"

# A role exists and the session's own role may SET ROLE to it (migration 003 does the same
# for the reader): created and granted where the session may do so, otherwise an error
# with the hint an operator needs.
_CREATE_ROLE = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN
        BEGIN
            CREATE ROLE {role} NOLOGIN;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role % may not create the role {role}', current_user
                    USING HINT = 'as a superuser: CREATE ROLE {role} NOLOGIN; GRANT '
                        '{role} TO ' || current_user || ' (docs/operations.md)';
        END;
    END IF;
    IF NOT pg_has_role(current_user, '{role}', 'MEMBER') THEN
        BEGIN
            GRANT {role} TO CURRENT_USER;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role % may not {verb} as {role}', current_user
                USING HINT = 'as a superuser: GRANT {role} TO ' || current_user
                    || ' (docs/operations.md)';
        END;
    END IF;
END $$;
"""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def ensure_roles(conn: asyncpg.Connection) -> None:
    """The reader and projector roles exist (roles belong to the cluster, shared by its
    databases) and the session's role is a member of both."""
    await conn.execute(_CREATE_ROLE.format(role=READER, verb="read"))
    await conn.execute(_CREATE_ROLE.format(role=PROJECTOR, verb="project"))


async def confine(conn: asyncpg.Connection, schema: str, tables: Iterable[str]) -> None:
    """Tenant rows only, read-only, for the reader on these tables; every row, to write,
    for the projector (idempotent). The caller grants the projector its checkpoint."""
    tables = tuple(tables)
    await ensure_roles(conn)
    await conn.execute(f"GRANT USAGE ON SCHEMA {_ident(schema)} TO {READER}, {PROJECTOR}")
    for table in tables:
        name = f"{_ident(schema)}.{_ident(table)}"
        await conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {name} TO {PROJECTOR}")
    # Only tables that say whose rows they hold; the reader gets nothing of any other.
    tenanted = {
        r["table_name"]
        for r in await conn.fetch(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = $1 AND table_name = ANY($2) AND column_name = 'tenant_id'",
            schema,
            list(tables),
        )
    }
    for table in tables:
        if table not in tenanted:
            continue
        name = f"{_ident(schema)}.{_ident(table)}"
        await conn.execute(
            f"ALTER TABLE {name} ENABLE ROW LEVEL SECURITY;"
            f"DROP POLICY IF EXISTS tenant_rows ON {name};"
            f"CREATE POLICY tenant_rows ON {name} FOR SELECT TO {READER} "
            f"USING (tenant_id = current_setting('{SETTING}', true));"
            f"DROP POLICY IF EXISTS projector_rows ON {name};"
            f"CREATE POLICY projector_rows ON {name} FOR ALL TO {PROJECTOR} "
            "USING (true) WITH CHECK (true);"
            f"GRANT SELECT ON {name} TO {READER}"
        )


# The projector's role until the current transaction ends.
AS_PROJECTOR = f"SET LOCAL ROLE {PROJECTOR}"


async def act_for_tenant(conn: asyncpg.Connection, tenant: str) -> None:
    """From now on (until the connection is reset) this session reads as the tenant."""
    await conn.execute(f"SET ROLE {READER}")
    await conn.execute(f"SELECT set_config('{SETTING}', $1, false)", tenant)


async def act_as_owner(conn: asyncpg.Connection) -> None:
    """Back to the session's own role, no tenant named."""
    await conn.execute(f"RESET ROLE; SELECT set_config('{SETTING}', '', false)")
