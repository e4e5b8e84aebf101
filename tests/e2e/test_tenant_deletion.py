"""Deleting a whole tenant: its agencies and threads, its API keys, its key, its settings
(docs/data.md, "Deleting a tenant")."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
from pathlib import Path

import httpx
import pytest
from nats.errors import Error as NatsError
from structlog.testing import capture_logs

from agency.contracts.events import (
    AgencyDeleted,
    TenantDeleted,
    TenantDeletionRequested,
    ThreadDeleted,
)
from agency.contracts.sealed import PayloadErased
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.natsclient import connect as nats_connect
from agency.infra.keystore.operator import operator_keys
from agency.infra.keystore.vault import KeyVault, TenantKeyDestroyed
from agency.infra.launch import NatsServer
from agency.infra.nats_auth import CredentialIssuer, IssuedCredentials
from agency.services.cli import tenants_cmd
from agency.services.threads import tenant_erasure
from tests.e2e.conftest import ADMIN, Client
from tests.e2e.test_erasure_by_scope import second_agency, status_of, user_thread
from tests.helpers import assert_eventually, created_tenant

ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def listed_tenants(http: httpx.AsyncClient) -> set[str]:
    r = await http.get("/tenants", headers=ADMIN_AUTH)
    assert r.status_code == 200, r.text
    return {t["id"] for t in r.json()}


async def test_deleting_a_tenant_deletes_its_agencies_threads_keys_and_key(
    client: Client, bus: Bus
) -> None:
    other_agency = await second_agency(client)
    threads = [
        await user_thread(client, client.agency, "ann"),
        await user_thread(client, other_agency, "bob"),
    ]
    second_key = await client.http.post("/keys", json={"name": "second"})
    assert second_key.status_code == 201, second_key.text
    retention = await client.http.put("/retention", json={"days": 3})
    assert retention.status_code == 200, retention.text
    async with httpx.AsyncClient(base_url=client.http.base_url, timeout=20) as http:
        other_key, other_tenant, other_agency_b = await created_tenant(http, ADMIN, "kept", "k")
        other = httpx.Headers({"Authorization": f"Bearer {other_key}"})
        kept = await http.post(f"/agency/{other_agency_b}/agents", json={"agentType": "worker"},
                               headers=other)  # fmt: skip
        assert kept.status_code == 201, kept.text
        assert client.tenant in await listed_tenants(http)

        refused = await client.http.delete(f"/tenants/{client.tenant}")
        assert refused.status_code == 403, refused.text
        r = await http.delete(f"/tenants/{client.tenant}", headers=ADMIN_AUTH)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["tenantId"] == client.tenant and body["requestedBy"] == "admin"
        assert sorted(body["agencies"]) == sorted([client.agency, other_agency])
        assert len(body["apiKeysRevoked"]) == 2 and body["deletedAt"] and body["requestId"]
        assert body["readModelsCaughtUp"] is True

        # The tenant's keys answer 401 at once; its admin routes 404; it is not listed.
        for path in ("/agencies", f"/agency/{client.agency}/agent/{threads[0]}/state"):
            assert (await client.http.get(path)).status_code == 401
        second = {"Authorization": f"Bearer {second_key.json()['apiKey']}"}
        assert (await http.get("/agencies", headers=second)).status_code == 401
        for path in ("keys", "budget", "retention", "providers", "export"):
            answer = await http.get(f"/tenants/{client.tenant}/{path}", headers=ADMIN_AUTH)
            assert answer.status_code == 404, (path, answer.text)
        new_key = await http.post(f"/tenants/{client.tenant}/keys", json={"name": "x"},
                                  headers=ADMIN_AUTH)  # fmt: skip
        assert new_key.status_code == 404, new_key.text
        assert client.tenant not in await listed_tenants(http)

        # On the log: each agency deleted, each thread tombstoned, `tenant.deleted` last.
        for agency in (client.agency, other_agency):
            events = await bus.store.read(client.tenant, "agency", agency)
            assert isinstance(events[-1].payload, AgencyDeleted)
        for thread in threads:
            events = await bus.store.read(client.tenant, "thread", thread)
            assert isinstance(events[-1].payload, ThreadDeleted)
        history = await bus.store.read(client.tenant, "tenant", client.tenant)
        last = history[-1].payload
        assert isinstance(last, TenantDeleted) and last.requested_by == "admin"
        assert sum(isinstance(e.payload, TenantDeletionRequested) for e in history) == 1

        # The tenant's key is destroyed; another tenant's key is untouched.
        vault = await KeyVault(bus.js, operator_keys()).open()
        with pytest.raises(TenantKeyDestroyed):
            await vault.tenant_record(client.tenant)
        with pytest.raises(TenantKeyDestroyed):
            await vault.tenant_key(client.tenant)
        assert (await vault.tenant_record(other_tenant))[0] is not None
        state = await http.get(f"/agency/{other_agency_b}/agent/{kept.json()['id']}/state",
                               headers=other)  # fmt: skip
        assert state.status_code == 200, state.text

        # A repeat answers the first deletion.
        again = await http.delete(f"/tenants/{client.tenant}", headers=ADMIN_AUTH)
        assert again.status_code == 200, again.text
        assert {k: v for k, v in again.json().items() if k != "readModelsCaughtUp"} == {
            k: v for k, v in body.items() if k != "readModelsCaughtUp"
        }
        assert (await http.delete("/tenants/nosuch", headers=ADMIN_AUTH)).status_code == 404

        # A tenant of the same name later is a new one.
        _, renewed, _ = await created_tenant(http, ADMIN, "e2e")
        assert renewed != client.tenant and renewed in await listed_tenants(http)


async def test_a_thread_the_deletion_missed_does_not_open_once_the_tenant_key_is_gone(
    client: Client, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tenant key wraps every data key of the tenant: a thread no agency deletion
    reached still cannot be read once it is destroyed."""
    missed = await user_thread(client, client.agency, "cy")
    assert await status_of(client, client.agency, missed) == 200

    async def no_agencies(bus: Bus, tenant_id: str) -> list[str]:
        return []

    monkeypatch.setattr(tenant_erasure, "agencies_of", no_agencies)
    async with httpx.AsyncClient(base_url=client.http.base_url, timeout=20) as http:
        r = await http.delete(f"/tenants/{client.tenant}", headers=ADMIN_AUTH)
    assert r.status_code == 200 and r.json()["agencies"] == [], r.text
    vault = await KeyVault(bus.js, operator_keys()).open()
    with pytest.raises(PayloadErased):
        await vault.data_key(client.tenant, missed, create=False)
    with pytest.raises(PayloadErased):
        await vault.data_key(client.tenant, "a-new-thread", create=True)


async def test_an_agency_the_first_look_missed_is_deleted_too(
    client: Client, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agency created while the others were being deleted (here: one the first look at
    the log did not show) is deleted before the tenant is recorded deleted."""
    late = await second_agency(client)
    thread = await user_thread(client, late, "gus")
    real = tenant_erasure.agencies_of
    looks: list[int] = []

    async def late_on_first_look(bus: Bus, tenant_id: str) -> list[str]:
        found = await real(bus, tenant_id)
        looks.append(len(found))
        return [a for a in found if a != late] if len(looks) == 1 else found

    monkeypatch.setattr(tenant_erasure, "agencies_of", late_on_first_look)
    async with httpx.AsyncClient(base_url=client.http.base_url, timeout=20) as http:
        r = await http.delete(f"/tenants/{client.tenant}", headers=ADMIN_AUTH)
    assert r.status_code == 200, r.text
    assert sorted(r.json()["agencies"]) == sorted([client.agency, late])
    events = await bus.store.read(client.tenant, "agency", late)
    assert isinstance(events[-1].payload, AgencyDeleted) and events[-1].payload.threads == (thread,)


async def test_a_tenant_deletion_recorded_but_not_carried_out_is_finished_from_the_log(
    client: Client, bus: Bus
) -> None:
    thread = await user_thread(client, client.agency, "dee")
    position = await bus.store.last_position(client.tenant, "tenant", client.tenant)
    request = TenantDeletionRequested(requested_by="admin")
    await bus.store.append(client.tenant, "tenant", client.tenant, [request], expected=position)

    async def finished() -> None:
        history = await bus.store.read(client.tenant, "tenant", client.tenant)
        assert isinstance(history[-1].payload, TenantDeleted)
        events = await bus.store.read(client.tenant, "thread", thread)
        assert isinstance(events[-1].payload, ThreadDeleted)
        assert (await client.http.get("/agencies")).status_code == 401

    await assert_eventually(finished, timeout=30, interval=0.2)


async def nats_user_accepted(issued: IssuedCredentials) -> bool:
    """Whether the server lets the tenant's NATS user connect."""
    c = issued.credentials
    try:
        nc = await nats_connect(
            servers=issued.servers.split(","), user=c.user, password=c.password,
            inbox_prefix=c.inbox_prefix, allow_reconnect=False, connect_timeout=2,
            max_reconnect_attempts=0, error_cb=_quiet,
        )  # fmt: skip
    except (NatsError, OSError, TimeoutError):
        return False
    await nc.close()
    return True


async def _quiet(_: Exception) -> None:
    return None


async def test_a_tenant_deletion_finished_from_the_log_removes_its_nats_user(
    client: Client, bus: Bus, nats_server: NatsServer | None
) -> None:
    """The `erasures` consumer, not the API, carries the deletion out (as when the API was
    stopped once it recorded it): the tenant's NATS credentials stop working all the same."""
    if nats_server is None or nats_server.auth is None:
        pytest.skip("the tenants' NATS users are managed on the embedded server only")
    issued = await CredentialIssuer(nats_server.auth, nats_server.url).issue(client.tenant)
    assert await nats_user_accepted(issued)
    position = await bus.store.last_position(client.tenant, "tenant", client.tenant)
    request = TenantDeletionRequested(requested_by="admin")
    await bus.store.append(client.tenant, "tenant", client.tenant, [request], expected=position)

    async def refused() -> None:
        history = await bus.store.read(client.tenant, "tenant", client.tenant)
        assert isinstance(history[-1].payload, TenantDeleted)
        assert not await nats_user_accepted(issued)

    await assert_eventually(refused, timeout=30, interval=0.2)
    assert f"tenant_{client.tenant}" not in nats_server.auth.conf_path.read_text()


async def test_two_deletions_asked_at_once_delete_the_tenant_once_and_answer_alike(
    client: Client, bus: Bus
) -> None:
    await user_thread(client, client.agency, "fay")
    async with httpx.AsyncClient(base_url=client.http.base_url, timeout=20) as http:
        path = f"/tenants/{client.tenant}"
        first, second = await asyncio.gather(
            http.delete(path, headers=ADMIN_AUTH), http.delete(path, headers=ADMIN_AUTH)
        )
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    for field in ("requestId", "requestedAt", "deletedAt", "agencies", "apiKeysRevoked"):
        assert first.json()[field] == second.json()[field], field
    history = await bus.store.read(client.tenant, "tenant", client.tenant)
    assert sum(isinstance(e.payload, TenantDeleted) for e in history) == 1
    assert isinstance(history[-1].payload, TenantDeleted)


async def test_the_admin_cli_deletes_a_tenant(client: Client, tmp_path: Path) -> None:
    await user_thread(client, client.agency, "eve")
    endpoints = Endpoints(
        pid=os.getpid(), nats_url="nats://unused", database_url="postgresql://unused",
        api_url=str(client.http.base_url), admin_secret=ADMIN,
    )  # fmt: skip
    write_endpoints(tmp_path, endpoints)
    parser = argparse.ArgumentParser(prog="agency")
    tenants_cmd.register(parser.add_subparsers(dest="group", required=True))
    args = parser.parse_args(["tenants", "delete", client.tenant, "--data-dir", str(tmp_path)])
    out, err = io.StringIO(), io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = await args.handler(args)
    assert status == 0, err.getvalue()
    assert f"deleted tenant {client.tenant}" in out.getvalue()
    assert "1 agenc(ies), 1 API key(s) revoked" in out.getvalue()
    assert (await client.http.get("/agencies")).status_code == 401
