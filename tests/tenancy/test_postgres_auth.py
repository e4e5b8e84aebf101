"""PostgreSQL with password (SCRAM) authentication: the test server asks every client for
one, and `agency up` runs every service and the API as a password role named by its
settings (`DATABASE_URL`), not as a superuser."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit

import asyncpg
import httpx
import pytest

from agency.contracts.ids import new_id
from agency.infra.db import DatabaseRefused, migrate_database
from agency.projections.tenancy import PROJECTOR, READER
from tests.helpers import printed_until_ready, run_completes_over_http

REPO = Path(__file__).resolve().parents[2]


def _with(url: str, user: str, password: str | None, database: str) -> str:
    parts = urlsplit(url)
    who = quote(user, safe="") + (":" + quote(password, safe="") if password is not None else "")
    return f"postgresql://{who}@{parts.hostname}:{parts.port}/{quote(database, safe='')}"


async def test_the_test_postgres_asks_every_tcp_client_for_a_scram_password(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        rules = await conn.fetch(
            "SELECT type, auth_method FROM pg_hba_file_rules WHERE error IS NULL"
        )
        methods = {r["auth_method"] for r in rules if r["type"].startswith("host")}
        assert methods == {"scram-sha-256"}, rules
        assert await conn.fetchval("SHOW password_encryption") == "scram-sha-256"
        user = urlsplit(database_url).username
        # How this very session was authenticated, as the server recorded it.
        assert await conn.fetchval("SELECT system_user") == f"scram-sha-256:{user}"
    finally:
        await conn.close(timeout=5)
    no_password = _with(database_url, str(user), None, "postgres")
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(no_password, timeout=10)
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(_with(database_url, str(user), "wrong", "postgres"), timeout=10)


@pytest.mark.slow
async def test_agency_up_runs_every_service_as_a_password_role_from_database_url(
    database_url: str, tmp_path: Path
) -> None:
    role, database = "svc" + new_id().lower(), "db" + new_id().lower()
    # A password a URL must escape: the services read it from DATABASE_URL as given.
    password = "p@ss:w/rd%?#" + secrets.token_urlsafe(12)
    admin = await asyncpg.connect(database_url, timeout=10)
    try:
        # What an operator does once: a login role owning the database, and (docs/
        # operations.md) membership of the roles tenant requests read as and the projector
        # writes as.
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        await admin.execute(f"CREATE DATABASE {database} OWNER {role}")
        for granted in (READER, PROJECTOR):
            await admin.execute(
                f"DO $$ BEGIN CREATE ROLE {granted} NOLOGIN; "
                "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
            )
            await admin.execute(f"GRANT {granted} TO {role}")
        stored = await admin.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", role)
        assert stored.startswith("SCRAM-SHA-256$")
    finally:
        await admin.close(timeout=5)
    service_url = _with(database_url, role, password, database)
    env = {
        **os.environ,
        "DATABASE_URL": service_url,
        "AGENCY_LOG_FORMAT": "json",
    }
    # Its own NATS server in the data directory: the suite's shared stream holds every other
    # test's events, which a fresh database's projector would first have to work through.
    env.pop("NATS_URL", None)
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "up", "--data-dir", str(tmp_path / "up"),
        "--port", "0", "--app", "tests.runtime.conftest:make_system",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.create_task(proc.stderr.read())
    try:
        printed = await printed_until_ready(proc, errors)
        api, api_key = printed["api"].split()[0], printed["api key"]
        # The printed URL never shows the password.
        assert password not in printed["postgres"] and quote(password, safe="") not in str(printed)
        headers = {"Authorization": f"Bearer {api_key}"}
        async with httpx.AsyncClient(base_url=api, headers=headers, timeout=20) as http:
            r = await http.post("/agencies", json={"name": "scram"})
            assert r.status_code == 201, r.text
            agency = r.json()["id"]
            # Written by the projector, read by a tenant request under row-level security.
            await run_completes_over_http(http, agency, "hello over scram")
            assert (await http.get("/readyz")).status_code == 200

        admin = await asyncpg.connect(database_url, timeout=10)
        try:
            users = await admin.fetch(
                "SELECT DISTINCT usename FROM pg_stat_activity WHERE datname = $1", database
            )
        finally:
            await admin.close(timeout=5)
        # Every session on the database is the service role's (the pool, the projector).
        assert [r["usename"] for r in users] == [role]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await asyncio.wait_for(errors, timeout=10)


async def test_a_role_that_may_not_read_as_the_reader_is_told_what_to_grant(
    database_url: str,
) -> None:
    role, database = "svc" + new_id().lower(), "db" + new_id().lower()
    password = secrets.token_urlsafe(16)
    admin = await asyncpg.connect(database_url, timeout=10)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        await admin.execute(f"CREATE DATABASE {database} OWNER {role}")
        await admin.execute(
            f"DO $$ BEGIN CREATE ROLE {READER} NOLOGIN; "
            "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
    finally:
        await admin.close(timeout=5)
    with pytest.raises(DatabaseRefused) as raised:
        await migrate_database(_with(database_url, role, password, database))
    assert raised.value.problem == f"role {role} may not read as {READER}"
    assert raised.value.hint == f"as a superuser: GRANT {READER} TO {role} (docs/operations.md)"
    assert password not in str(raised.value)


async def test_agency_up_with_a_wrong_password_says_so_in_one_line(
    database_url: str, nats_url: str, tmp_path: Path
) -> None:
    user = str(urlsplit(database_url).username)
    wrong = _with(database_url, user, "not-the-password", "postgres")
    env = {**os.environ, "DATABASE_URL": wrong, "NATS_URL": nats_url, "AGENCY_LOG_FORMAT": "json"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", "up", "--data-dir", str(tmp_path),
        "--port", "0", cwd=REPO, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=90)
    assert proc.returncode == 2, err.decode()[-3000:]
    problem = [line for line in err.decode().splitlines() if line.startswith("agency: ")]
    parts = urlsplit(database_url)
    assert problem == [
        f"agency: PostgreSQL at postgresql://{user}@{parts.hostname}:{parts.port}/postgres "
        f'refused: password authentication failed for user "{user}"; check the user and '
        "password of DATABASE_URL"
    ]
    assert "not-the-password" not in err.decode()
