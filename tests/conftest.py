"""Session-wide real servers: one NATS and one PostgreSQL, each test on its own tenant.

`AGENCY_TEST_BACKEND=testcontainers` uses containers where a Docker engine answers; the
embedded binaries are used otherwise (and always where no engine runs).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg
import pytest

from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import provision
from agency.infra.launch import NatsServer, PostgresServer
from agency.infra.launch.testcontainers_backend import docker_available

if TYPE_CHECKING:
    from playwright.async_api import Browser

    from agency.services.llm.fake_server import FakeLLMServer


def _use_containers() -> bool:
    return os.environ.get("AGENCY_TEST_BACKEND") == "testcontainers" and docker_available()


@pytest.fixture(scope="session", autouse=True)
def every_second_schedules() -> Iterator[None]:
    """Schedules in tests may tick every second, as often as they like: the documented
    limits (`ScheduleLimits`) are held where a test names them (tests/fairness)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENCY_SCHEDULE_MIN_INTERVAL", "1")
        patch.setenv("AGENCY_TENANT_SCHEDULE_FIRES_PER_MINUTE", "0")
        yield


@pytest.fixture(scope="session", autouse=True)
def one_operator_key() -> Iterator[None]:
    """One operator key for the test process and every service it starts (`agency serve` in
    a child process included), as a deployment sets it on each (docs/data.md)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENCY_OPERATOR_KEY", "tests-" + secrets.token_urlsafe(24))
        yield


@pytest.fixture(scope="session")
def session_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="agency-test-") as d:
        yield Path(d)


@pytest.fixture(scope="session")
async def nats_server(session_dir: Path) -> AsyncIterator[NatsServer | None]:
    """The embedded server, with authorization as `agency up` runs it; None in containers."""
    if _use_containers():
        yield None
        return
    async with NatsServer(session_dir / "nats", sync_interval="default", auth=True) as server:
        yield server


@pytest.fixture(scope="session")
async def nats_url(nats_server: NatsServer | None) -> AsyncIterator[str]:
    """The URL with the admin's credentials: tests act as operators and as every service."""
    if nats_server is not None:
        yield nats_server.admin_url
        return
    from agency.infra.launch.testcontainers_backend import nats_container

    with nats_container() as url:
        yield url


@pytest.fixture(scope="session")
async def database_url(session_dir: Path) -> AsyncIterator[str]:
    if _use_containers():
        from agency.infra.launch.testcontainers_backend import postgres_container

        with postgres_container() as url:
            yield url
        return
    # As `agency up` runs it: SCRAM password auth for every client, the password in the URL
    # (tests/tenancy/test_postgres_auth.py checks the server asks for it).
    async with PostgresServer(session_dir / "pg", fsync=False, password_auth=True) as server:
        yield server.url


@pytest.fixture(scope="session")
async def bus(nats_url: str) -> AsyncIterator[Bus]:
    async with Bus(nats_url, name="tests") as connected:
        await provision(connected.js)
        yield connected


@pytest.fixture
def tenant() -> str:
    """A fresh tenant per test: tests share servers, never data."""
    return "t" + new_id().lower()


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(database_url, timeout=10)
    try:
        yield conn
    finally:
        await conn.close(timeout=5)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """Debian's chromium for a module's browser tests (`tests/browser.py`); imported here
    only when a test asks for it."""
    from tests.browser import chromium

    async with chromium() as opened:
        yield opened


@pytest.fixture(scope="module")
async def llm() -> AsyncIterator[FakeLLMServer]:
    """The fake model (`services/llm/fake_server.py`), answering at once, for a module's
    tests; each test scripts it under a key of its own."""
    from agency.services.llm.fake_server import FakeLLMServer

    async with FakeLLMServer(instant=True) as server:
        yield server
