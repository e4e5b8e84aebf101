"""Rotating the keys that seal thread data (docs/data.md): threads sealed, a tenant's key
rotated over HTTP and the CLI, the operator key rotated with `agency keys rotate`, the
services restarted on the new key alone; every thread still reads, through the API and a
fresh process reading the log, the old keys open nothing, another tenant is untouched."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import msgspec
import nats
import pytest
from cryptography.exceptions import InvalidTag
from nats.aio.client import Client as NATS

from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.streams import provision
from agency.infra.keystore import current_cipher
from agency.infra.keystore.operator import (
    OPERATOR_KEY_VARIABLE,
    PREVIOUS_KEY_VARIABLE,
    KeyUnwrapError,
    LocalKeyWrapper,
    open_key,
)
from agency.infra.keystore.vault import KeyVault, WrappedKey, data_entry
from agency.infra.launch import NatsServer
from agency.services.llm.fake_server import FakeLLMServer
from tests.e2e.conftest import ADMIN, running_system
from tests.helpers import assert_eventually, created_tenant

REPO = Path(__file__).resolve().parents[2]


async def agency(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agency.services.cli.main", *args,
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    return proc.returncode or 0, out.decode(), err.decode()


class Deployment:
    """A NATS server of its own (so this test's keys are its own) and the system on it,
    started and stopped as a deployment restarts its processes."""

    def __init__(self, server: NatsServer, database_url: str, llm: FakeLLMServer) -> None:
        self.server, self.database_url, self.llm = server, database_url, llm

    @asynccontextmanager
    async def running(self, data: Path) -> AsyncIterator[httpx.AsyncClient]:
        """The system up, its endpoints in `data` for the commands run against it."""
        # A restart: no cipher of this server's is left from the last run's processes.
        held = current_cipher()
        assert held is None or held.url != self.server.admin_url
        async with (
            running_system(self.server.admin_url, self.database_url, self.server, self.llm) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as http,
        ):
            write_endpoints(data, Endpoints(
                pid=os.getpid(), nats_url=self.server.admin_url, database_url="",
                api_url=url, admin_secret=ADMIN,
            ))  # fmt: skip
            yield http

    async def vault(self, key: str) -> tuple[KeyVault, NATS]:
        nc = await nats.connect(self.server.admin_url, connect_timeout=5)
        return await KeyVault(nc.jetstream(timeout=5), LocalKeyWrapper(key)).open(), nc


async def sealed_thread(http: httpx.AsyncClient, key: str, agency_id: str, text: str) -> str:
    auth = {"Authorization": f"Bearer {key}"}
    r = await http.post(f"/agency/{agency_id}/agents", json={"agentType": "worker"}, headers=auth)
    assert r.status_code == 201, r.text
    thread = str(r.json()["id"])
    body = {"messages": [{"role": "user", "content": text}]}
    r = await http.post(f"/agency/{agency_id}/agent/{thread}/invoke", json=body, headers=auth)
    assert r.status_code == 202, r.text
    return thread


async def said(http: httpx.AsyncClient, key: str, agency_id: str, thread: str) -> str:
    """The thread's events as the API reads them off the log; waited for while a restarted
    system's read models (each run on a database of its own) are rebuilt from the log."""
    auth = {"Authorization": f"Bearer {key}"}
    found: list[str] = []

    async def read() -> None:
        r = await http.get(f"/agency/{agency_id}/agent/{thread}/events", headers=auth)
        assert r.status_code == 200, r.text
        found.append(json.dumps(r.json()))

    await assert_eventually(read, timeout=60, interval=0.2)
    return found[-1]


@pytest.fixture
async def deployment(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Deployment]:
    monkeypatch.setenv(OPERATOR_KEY_VARIABLE, "old-" + secrets.token_urlsafe(16))
    monkeypatch.delenv(PREVIOUS_KEY_VARIABLE, raising=False)
    async with (
        NatsServer(tmp_path / "nats", sync_interval="default", auth=True) as server,
        FakeLLMServer(instant=True) as llm,
    ):
        async with Bus(server.admin_url, name="provision") as bus:
            await provision(bus.js)
        yield Deployment(server, database_url, llm)


async def test_rotated_keys_open_every_thread_after_a_restart_and_the_old_ones_nothing(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = os.environ[OPERATOR_KEY_VARIABLE]
    new = "new-" + secrets.token_urlsafe(16)
    data = tmp_path / "data"
    data.mkdir()
    async with deployment.running(data) as http:
        key_a, tenant_a, agency_a = await created_tenant(http, ADMIN, "a", "a")
        key_b, tenant_b, agency_b = await created_tenant(http, ADMIN, "b", "b")
        assert agency_a is not None and agency_b is not None
        threads_a = [await sealed_thread(http, key_a, agency_a, f"a-{n}") for n in range(2)]
        thread_b = await sealed_thread(http, key_b, agency_b, "b-0")
        for thread in threads_a:

            async def answered(thread: str = thread) -> None:
                assert "assistant" in await said(http, key_a, agency_a, thread)

            await assert_eventually(answered, timeout=60, interval=0.2)
        vault, nc = await deployment.vault(old)
        old_tenant_key = await vault.tenant_key(tenant_a)
        other_before = (await vault.kv.get(data_entry(tenant_b, thread_b))).value
        other_tenant = (await vault.kv.get(f"tenant.{tenant_b}")).value

        admin = {"Authorization": f"Bearer {ADMIN}"}
        path = f"/tenants/{tenant_a}/encryption-key/rotate"
        assert (
            await http.post(path, headers={"Authorization": f"Bearer {key_a}"})
        ).status_code == 403
        missing = await http.post("/tenants/tnosuchtenant/encryption-key/rotate", headers=admin)
        assert missing.status_code == 404
        r = await http.post(path, headers=admin)
        assert r.status_code == 200, r.text
        first = r.json()
        # The two threads' keys, and any made ahead for the tenant's next root threads
        # (`infra/keystore/key_pool.py`): data keys too, each rewrapped.
        assert first["rewrapped"] >= 2 and first["rotatedBy"] == "admin" and not first["resumed"]
        code, out, err = await agency(
            "keys", "rotate", "--tenant", tenant_a, "--data-dir", str(data)
        )
        assert code == 0, err
        counted = re.search(r"(\d+) data keys rewrapped", out)
        assert f"tenant {tenant_a}" in out and counted is not None, out
        assert int(counted[1]) >= 2, out
        once = {**admin, "Idempotency-Key": "rotate-" + secrets.token_hex(4)}
        made, repeat = [(await http.post(path, headers=once)).json() for _ in range(2)]
        assert made["keyVersion"] == repeat["keyVersion"] != first["keyVersion"]
        assert not made["resumed"] and repeat["resumed"] and repeat["rewrapped"] == 0
        bad = await http.post(path, headers={**admin, "Idempotency-Key": "a b"})
        assert bad.status_code == 400, bad.text

        for thread in threads_a:
            entry = data_entry(tenant_a, thread)
            stored = msgspec.json.decode((await vault.kv.get(entry)).value or b"", type=WrappedKey)
            with pytest.raises(InvalidTag):
                open_key(old_tenant_key, stored.data, entry.encode())
        assert (await vault.kv.get(data_entry(tenant_b, thread_b))).value == other_before
        assert (await vault.kv.get(f"tenant.{tenant_b}")).value == other_tenant
        await nc.close()

    # Every process restarted holding both operator keys, then the tenant keys rewrapped.
    monkeypatch.setenv(OPERATOR_KEY_VARIABLE, new)
    monkeypatch.setenv(PREVIOUS_KEY_VARIABLE, old)
    async with deployment.running(data) as http:
        code, out, err = await agency("keys", "rotate", "--data-dir", str(data))
        assert code == 0, err
        # A's and B's keys at least: the deployment's own tenant has one too once it has
        # sealed something, which depends on what its start got to do.
        rewrapped = re.search(r"(\d+) tenant keys rewrapped, 0 already under it", out)
        assert rewrapped is not None and int(rewrapped[1]) >= 2, out
        code, out, err = await agency("keys", "rotate", "--data-dir", str(data))
        assert code == 0, err
        again = re.search(r"0 tenant keys rewrapped, (\d+) already under it", out)
        assert again is not None and int(again[1]) >= int(rewrapped[1]), out

    # Restarted on the new key alone: every thread reads, in the API and a fresh process.
    monkeypatch.delenv(PREVIOUS_KEY_VARIABLE)
    async with deployment.running(data) as http:
        for n, thread in enumerate(threads_a):
            assert f"a-{n}" in await said(http, key_a, agency_a, thread)
        assert "b-0" in await said(http, key_b, agency_b, thread_b)
        code, out, err = await agency(
            "replay", threads_a[0], "--tenant", tenant_a, "--json", "--data-dir", str(data)
        )
        assert code == 0 and "a-0" in out, err
    vault, nc = await deployment.vault(old)
    try:
        with pytest.raises(KeyUnwrapError):
            await vault.tenant_key(tenant_a)
    finally:
        await nc.close()
