"""The whole system in the test process, driven by the official MCP client at `/mcp`:
every service, the API, real NATS and PostgreSQL, the fake model over HTTP with latency."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import httpx2
import mcp_types as types
import msgspec
import pytest
from mcp.client.session import ClientSession, LoggingFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import ProgressFnT

from agency.contracts.ids import new_id
from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.projections.setup import prepare_read_models
from agency.services.api.deps import ApiDeps, ApiSettings
from agency.services.api.forwarded import TrustedProxies
from agency.services.api.tenant_scope import scope_session
from agency.services.llm.fake_server import FakeLLMServer
from agency.services.llm.provider import OpenAIProvider
from agency.services.stack import StackConfig
from tests.helpers import created_tenant, fresh_database
from tests.runtime.conftest import make_system
from tests.serving import serving

ADMIN = "admin-" + secrets.token_urlsafe(12)
# The tests' proxies, at 127.0.0.1, are trusted to say what the client called.
SETTINGS = ApiSettings(admin_secret=ADMIN, trusted_proxies=TrustedProxies.parse("127.0.0.1"))
# How a client opens: as those of the 2025 revisions, or of 2026-07-28.
Era = Literal["initialize", "discover"]
ERAS: tuple[Era, ...] = ("initialize", "discover")


@dataclass(frozen=True)
class System:
    url: str
    llm: FakeLLMServer
    deps: ApiDeps


@dataclass(frozen=True)
class Tenant:
    url: str
    llm: FakeLLMServer
    key: str
    agency: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def http(self) -> httpx.AsyncClient:
        """The HTTP API as this tenant, to check what a tool call did."""
        return httpx.AsyncClient(
            base_url=self.url, timeout=20, headers={"Authorization": f"Bearer {self.key}"}
        )


# One system per module: its runtime and tools service share the session's durable
# consumers, so it must not be running while another module's services are.
@pytest.fixture(scope="module")
async def mcp_system(nats_url: str, database_url: str, bus: Bus) -> AsyncIterator[System]:
    db_url = await fresh_database(database_url, "mcp")
    pool = await create_pool(db_url, max_size=10, setup=scope_session)
    async with pool.acquire() as conn:
        await migrate(conn)
    await prepare_read_models(pool)
    # Every model answer comes 20 to 80 ms late, so waits really wait.
    async with FakeLLMServer(instant=True, latency_ms=(20, 80)) as llm:
        provider = OpenAIProvider(base_url=llm.base_url, api_key="fake")
        system = make_system()
        api_bus = await Bus(nats_url, name="mcp-api").connect()
        deps = ApiDeps(pool=pool, bus=api_bus, system=system, settings=SETTINGS)
        config = StackConfig(
            nats_url=nats_url, database_url=db_url, system=system, provider=provider
        )
        try:
            async with serving(deps, config) as url:
                yield System(url=url, llm=llm, deps=deps)
        finally:
            await provider.close()
            await api_bus.close()
            await asyncio.wait_for(pool.close(), timeout=10)


async def new_tenant(system: System) -> Tenant:
    async with httpx.AsyncClient(base_url=system.url, timeout=20) as http:
        key, _, _ = await created_tenant(http, ADMIN, "mcp")
        r = await http.post(
            "/agencies",
            json={"name": "mcp-" + new_id()},
            headers={"Authorization": f"Bearer {key}"},
        )
        assert r.status_code == 201, r.text
        return Tenant(url=system.url, llm=system.llm, key=key, agency=r.json()["id"])


@pytest.fixture
async def caller(mcp_system: System) -> Tenant:
    return await new_tenant(mcp_system)


@asynccontextmanager
async def mcp_session(
    url: str,
    headers: dict[str, str],
    era: Era = "initialize",
    *,
    logging_callback: LoggingFnT | None = None,
    log_level: types.LoggingLevel | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with the server at `url` + `/mcp`.

    `initialize` opens it as clients of the 2025 revisions do, `discover` as those of the
    2026-07-28 revision (`log_level` is then the level each request asks to hear). Entered
    in the test itself, not in a fixture: the SDK's task groups must be left by the task
    that entered them."""
    timeout = httpx2.Timeout(20.0, read=120.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
        ClientSession(
            read, write, logging_callback=logging_callback, log_level=log_level
        ) as session,
    ):
        if era == "initialize":
            await session.initialize()
        else:
            await session.discover()
        yield session


async def call(
    session: ClientSession, tool: str, progress: ProgressFnT | None = None, **arguments: Any
) -> dict[str, Any]:
    """The structured answer of a tool call that must succeed."""
    result = await session.call_tool(tool, arguments, progress_callback=progress)
    assert isinstance(result, types.CallToolResult)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    # The text content says the same, for clients that read only text.
    (text,) = result.content
    assert isinstance(text, types.TextContent)
    assert msgspec.json.decode(text.text) == result.structured_content
    return result.structured_content


async def refusal(session: ClientSession, tool: str, **arguments: Any) -> str:
    """The message of a tool call that must fail as a tool error."""
    result = await session.call_tool(tool, arguments)
    assert isinstance(result, types.CallToolResult)
    assert result.is_error, result.structured_content
    (text,) = result.content
    assert isinstance(text, types.TextContent)
    return text.text


@pytest.fixture(scope="package", autouse=True)
def allow_loopback() -> Iterator[None]:
    """The operator's allowance for the test's MCP servers, on loopback: connections made
    for a tenant reach no private address otherwise (`services/egress.py`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
        yield
