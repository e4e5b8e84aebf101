"""Row-level security: the reader role sees only the rows of the tenant its session names."""

from __future__ import annotations

import asyncpg
import pytest

from agency.infra.db import create_pool, migrate
from agency.projections.setup import prepare_read_models
from agency.projections.tenancy import PROJECTOR, READER, act_for_tenant
from agency.services.api.tenant_scope import current_tenant, scope_session
from tests.helpers import fresh_database


async def test_a_query_without_the_tenant_setting_sees_nothing_and_with_it_only_its_rows(
    database_url: str,
) -> None:
    url = await fresh_database(database_url, "rls")
    pool = await create_pool(url, max_size=2, setup=scope_session)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        await prepare_read_models(pool)
        async with pool.acquire() as owner:  # the projector's side: writes everything
            await owner.executemany(
                "INSERT INTO agencies (tenant_id, agency_id, name, metadata, created_at) "
                "VALUES ($1, $2, $3, '{}', now())",
                [("ta", "a1", "A's"), ("ta", "a2", "A's too"), ("tb", "b1", "B's")],
            )
            assert await owner.fetchval("SELECT count(*) FROM agencies") == 3
        conn = await asyncpg.connect(url, timeout=10)
        try:
            await conn.execute(f"SET ROLE {READER}")
            assert await conn.fetchval("SELECT count(*) FROM agencies") == 0
            assert await conn.fetchval("SELECT count(*) FROM threads") == 0
            await act_for_tenant(conn, "ta")
            rows = await conn.fetch("SELECT tenant_id, agency_id FROM agencies ORDER BY 2")
            assert [tuple(r) for r in rows] == [("ta", "a1"), ("ta", "a2")]
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(
                    "INSERT INTO agencies (tenant_id, agency_id, name, metadata, created_at) "
                    "VALUES ('ta', 'x', 'x', '{}', now())"
                )
        finally:
            await conn.close(timeout=5)
        # The API's pool: a tenant's request reads as the tenant; a released session is reset.
        token = current_tenant.set("tb")
        try:
            async with pool.acquire() as scoped:
                assert await scoped.fetchval("SELECT count(*) FROM agencies") == 1
        finally:
            current_tenant.reset(token)
        async with pool.acquire() as unscoped:
            assert await unscoped.fetchval("SELECT count(*) FROM agencies") == 3
    finally:
        await pool.close()


async def test_the_projector_role_writes_every_tenants_read_models_and_nothing_else(
    database_url: str,
) -> None:
    url = await fresh_database(database_url, "rls")
    pool = await create_pool(url, max_size=2)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        await prepare_read_models(pool)
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {PROJECTOR}")
            await conn.executemany(
                "INSERT INTO agencies (tenant_id, agency_id, name, metadata, created_at) "
                "VALUES ($1, $2, $3, '{}', now())",
                [("ta", "a1", "A's"), ("tb", "b1", "B's")],
            )
            assert await conn.fetchval("SELECT count(*) FROM agencies") == 2
            await conn.execute("UPDATE agency_projection_checkpoints SET stream_seq = stream_seq")
        refused = [
            "INSERT INTO agency_api_key_usage (key_id, tenant_id, last_used_at) "
            "VALUES ('k', 'ta', now())",
            "DROP TABLE agencies",
            "CREATE TABLE sneaky (x int)",
            "ALTER TABLE agencies DISABLE ROW LEVEL SECURITY",
        ]
        for statement in refused:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {PROJECTOR}")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(statement)
    finally:
        await pool.close()
