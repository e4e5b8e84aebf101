"""Connections made for a tenant reach no private address unless the operator allows it."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import msgspec
import pytest
import uvicorn

from agency.contracts.commands import SaveBlueprint
from agency.contracts.events import BlueprintSaved, BlueprintSpec, McpServer
from agency.contracts.events.blueprint import BlueprintConfig
from agency.contracts.ids import new_id
from agency.infra.jetstream import dlq_admin
from agency.infra.jetstream.connection import Bus
from agency.services.egress import (
    EgressPolicy,
    EgressRefused,
    guarded_httpx_transport,
    guarded_transport,
)
from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually
from tests.mcp.test_tool_servers import McpHttpServer
from tests.security.conftest import save, until_runs_end


@pytest.fixture
async def calc() -> AsyncIterator[McpHttpServer]:
    server = McpHttpServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class Redirector:
    """An HTTP server on 127.0.0.2 answering every request with a redirect to `target`."""

    def __init__(self, target: str) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.2", 0))
        self.url = f"http://127.0.0.2:{self._sock.getsockname()[1]}/mcp"

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                return
            headers = [(b"location", target.encode()), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 307, "headers": headers})
            await send({"type": "http.response.body", "body": b""})

        config = uvicorn.Config(app, log_level="warning", log_config=None, access_log=False)
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Redirector:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))

        async def started() -> None:
            assert self._server.started

        await assert_eventually(started, timeout=10)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await asyncio.wait_for(self._task, timeout=10)
        self._sock.close()


def with_server(name: str, url: str) -> dict[str, Any]:
    servers = [{"name": "calc", "url": url}]
    return {"name": name, "prompt": f"{name} prompt", "config": {"mcpServers": servers}}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/mcp",
        "http://localhost:8080/mcp",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/mcp",
        "http://[::1]:8080/mcp",
        "http://0.0.0.0:8080/mcp",
        "https://[fe80::1]/mcp",
        "http://192.168.1.1/mcp",
    ],
)
async def test_a_blueprint_naming_a_private_address_is_refused_on_save(
    tenant: Client, url: str
) -> None:
    r = await save(tenant, with_server("peek" + new_id().lower()[-8:], url))
    assert r.status_code == 403, r.text
    detail = r.json()["error"]
    assert "config.mcpServers[0]" in detail and "url" in detail and "AGENCY_ALLOW_HOSTS" in detail


async def test_the_operator_allows_a_host_and_its_server_is_then_saved_and_used(
    tenant: Client, calc: McpHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "calcer" + new_id().lower()[-8:]
    r = await save(tenant, with_server(name, calc.url))
    assert r.status_code == 403, r.text
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")
    r = await save(tenant, with_server(name, calc.url))
    assert r.status_code == 201, r.text
    call = {"name": "calc__add", "arguments": {"a": 2, "b": 3}}
    tenant.llm.script(
        f"{name} prompt", [ScriptStep(tool_calls=[call]), ScriptStep(content="it is 5")]
    )
    thread = await tenant.thread(name)
    await tenant.invoke(thread, "add")
    found = await until_runs_end(tenant, thread)
    outputs = [e["data"]["output"] for e in found if e["type"] == "tool.output"]
    assert outputs == ["5"]
    assert [e["type"] for e in found if e["type"].startswith("run.")][-1] == "run.completed"


def stored_spec(name: str, url: str) -> BlueprintSpec:
    return BlueprintSpec(
        name=name,
        prompt=f"{name} prompt",
        config=BlueprintConfig(mcp_servers=(McpServer(name="calc", url=url),)),
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_blueprint_saved_over_nats_reaching_loopback_is_dead_lettered(
    tenant: Client, bus: Bus, host: str
) -> None:
    """Past the HTTP check, on the tenant's own command subject: the registry refuses it."""
    name = "nats" + new_id().lower()[-8:]
    spec = stored_spec(name, f"http://{host}:9/mcp")
    await bus.commands.send(
        tenant.tenant, SaveBlueprint(agency_id=tenant.agency, blueprint=spec), idempotency_key=name
    )

    async def dead_lettered() -> dlq_admin.LetterInfo:
        letters = await dlq_admin.list_letters(
            bus.js, tenant=tenant.tenant, reason="egress_refused", limit=200
        )
        mine = [letter for letter in letters if name in letter.detail]
        assert mine, letters
        return mine[-1]

    letter = await assert_eventually(dead_lettered, timeout=20)
    assert "loopback" in letter.detail and "config.mcpServers[0].url" in letter.detail
    r = await tenant.http.get(f"/agency/{tenant.agency}/blueprints/{name}")
    assert r.status_code == 404, r.text


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_stored_blueprint_reaching_loopback_ends_its_run_with_the_reason(
    tenant: Client, bus: Bus, calc: McpHttpServer, host: str
) -> None:
    """Stored before the checks existed (appended to the log as it was then): refused on
    connecting, the name resolved first, and the server never hears from it."""
    name = "stored" + new_id().lower()[-8:]
    spec = stored_spec(name, f"http://{host}:{calc.port}/mcp")
    history = await bus.store.read(tenant.tenant, "agency", tenant.agency)
    await bus.store.append(
        tenant.tenant, "agency", tenant.agency,
        [BlueprintSaved(blueprint=spec, revision=1)], expected=history[-1].position,
    )  # fmt: skip

    async def listed() -> None:
        r = await tenant.http.get(f"/agency/{tenant.agency}/blueprints/{name}")
        assert r.status_code == 200, r.text

    await assert_eventually(listed, timeout=20)
    tenant.llm.script(f"{name} prompt", [ScriptStep(content="no tools needed")])
    thread = await tenant.thread(name)
    await tenant.invoke(thread, "hello")
    found = await until_runs_end(tenant, thread)

    (error,) = [e["data"] for e in found if e["type"] == "run.error"]
    assert error["kind"] == "egress_refused", error
    assert "loopback" in error["error"] and "AGENCY_ALLOW_HOSTS" in error["error"]
    assert calc.headers == []


async def test_a_redirect_from_an_allowed_host_to_loopback_is_not_followed(
    tenant: Client, calc: McpHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Redirector(calc.url) as redirector:
        policy = EgressPolicy.parse("127.0.0.2")
        transport = guarded_transport(policy)
        async with httpx2.AsyncClient(transport=transport, follow_redirects=True) as client:
            with pytest.raises(EgressRefused, match=r"127\.0\.0\.1 is a loopback address"):
                await client.post(redirector.url, json={})
        # A tenant's run against the allowed host: the redirect leads nowhere.
        monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.2")
        name = "redir" + new_id().lower()[-8:]
        r = await save(tenant, with_server(name, redirector.url))
        assert r.status_code == 201, r.text
        call = {"name": "calc__add", "arguments": {"a": 2, "b": 3}}
        tenant.llm.script(
            f"{name} prompt", [ScriptStep(tool_calls=[call]), ScriptStep(content="no tool")]
        )
        thread = await tenant.thread(name)
        await tenant.invoke(thread, "add")
        found = await until_runs_end(tenant, thread)
    assert not [e for e in found if e["type"] == "tool.output"]
    assert calc.headers == []


async def test_the_a2a_clients_transport_connects_only_where_the_policy_allows() -> None:
    """The transport remote A2A agents are reached through (`httpx` 1, the A2A SDK's)."""
    async with Redirector("http://127.0.0.1:9/card.json") as redirector:
        transport = guarded_httpx_transport(EgressPolicy.parse("127.0.0.2"))
        async with httpx.AsyncClient(transport=transport, follow_redirects=True) as client:
            r = await client.get(redirector.url, follow_redirects=False)
            assert r.status_code == 307, r.text
            with pytest.raises(EgressRefused, match=r"127\.0\.0\.1 is a loopback address"):
                await client.get(redirector.url)
        refused = guarded_httpx_transport(EgressPolicy.parse(""))
        async with httpx.AsyncClient(transport=refused) as client:
            with pytest.raises(EgressRefused, match=r"127\.0\.0\.2 is a loopback address"):
                await client.get(redirector.url)


def test_the_allowlist_takes_names_addresses_and_ranges() -> None:
    policy = EgressPolicy.parse(" mcp.internal , 10.8.0.0/16,[fd00::1]", ("nats://h:4222",))
    assert policy.hosts == {"mcp.internal"} and policy.own_ports == {4222}
    assert [str(n) for n in policy.networks] == ["10.8.0.0/16", "fd00::1/128"]
    with pytest.raises(ValueError, match="AGENCY_ALLOW_HOSTS"):
        EgressPolicy.parse("not a host!")
    assert msgspec.json.encode(policy.hosts)


def test_the_nats_profiling_port_stays_refused_on_an_allowed_loopback() -> None:
    """An operator who allows loopback and serves nats-server's profiles for measuring does
    not open them to a tenant's URLs: that port is one of the system's own."""
    env = {"AGENCY_ALLOW_HOSTS": "127.0.0.1", "AGENCY_NATS_PROFILE_PORT": "65432"}
    policy = EgressPolicy.from_env(env)
    loopback = ipaddress.ip_address("127.0.0.1")
    refused = policy.address_refusal(loopback, 65432, named=False)
    assert refused is not None and "belongs to this system's own services" in refused
    assert policy.address_refusal(loopback, 65431, named=False) is None  # allowed loopback
    unserved = EgressPolicy.from_env({"AGENCY_ALLOW_HOSTS": "127.0.0.1"})
    assert unserved.address_refusal(loopback, 65432, named=False) is None
