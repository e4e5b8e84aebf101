"""API keys: named, listed with last use, rotated and revoked, over HTTP and the CLI."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import httpx
import nats
from nats.aio.client import Client as NATS

from agency.infra.jetstream.connection import Bus
from agency.infra.launch import NatsServer
from agency.infra.nats_auth import CredentialIssuer
from agency.services.api.keys import KeyCache
from tests.api.conftest import Api, Tenant, running_api
from tests.helpers import assert_eventually, run_agency


class _LateCommands:
    """The API's bus, with every command sent `delay` seconds after the route asked."""

    def __init__(self, bus: Bus, delay: float) -> None:
        self._bus = bus
        self.commands = self
        self._delay = delay
        self._sends: set[asyncio.Task[object]] = set()

    def __getattr__(self, name: str) -> object:
        return getattr(self._bus, name)

    async def send(self, *args: object, **kwargs: object) -> None:
        async def later() -> object:
            await asyncio.sleep(self._delay)
            return await self._bus.commands.send(*args, **kwargs)  # type: ignore[arg-type]

        task = asyncio.create_task(later())
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def new_key(client: httpx.AsyncClient, tenant: Tenant, name: str) -> tuple[str, str]:
    r = await client.post("/keys", json={"name": name}, headers=tenant.auth)
    assert r.status_code == 201, r.text
    return r.json()["keyId"], r.json()["apiKey"]


async def test_a_tenant_creates_named_keys_and_sees_when_each_was_last_used(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    key_id, key = await new_key(client, tenant_a, "ci")
    assert (await client.get("/agencies", headers=bearer(key))).status_code == 200

    async def used() -> list[dict[str, object]]:
        r = await client.get("/keys", headers=tenant_a.auth)
        assert r.status_code == 200, r.text
        keys = {k["keyId"]: k for k in r.json()}
        assert keys[key_id]["name"] == "ci" and keys[key_id]["revokedAt"] is None
        assert keys[key_id]["lastUsedAt"] is not None
        return list(keys.values())

    keys = await assert_eventually(used, timeout=10)
    assert {k["name"] for k in keys} == {"default", "ci"}
    assert all("apiKey" not in k and "keyHash" not in k for k in keys)


async def test_a_revoked_key_is_refused_within_a_second_also_by_a_process_that_cached_it(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant
) -> None:
    key_id, key = await new_key(client, tenant_a, "leaked")
    # Another API process whose cache would keep the key for an hour.
    other_deps = replace(api.deps, keys=KeyCache(ttl=3600))
    async with running_api(other_deps) as other_url, httpx.AsyncClient(base_url=other_url) as other:
        assert (await other.get("/agencies", headers=bearer(key))).status_code == 200
        r = await client.delete(f"/keys/{key_id}", headers=tenant_a.auth)
        assert r.status_code == 204, r.text
        assert (await client.get("/agencies", headers=bearer(key))).status_code == 401

        async def refused() -> None:
            assert (await other.get("/agencies", headers=bearer(key))).status_code == 401

        await assert_eventually(refused, timeout=1.0, interval=0.02)
        assert (await other.get("/agencies", headers=tenant_a.auth)).status_code == 200
    listed = (await client.get("/keys", headers=tenant_a.auth)).json()
    assert next(k for k in listed if k["keyId"] == key_id)["revokedAt"] is not None


async def test_a_process_that_missed_the_revocation_message_still_cuts_the_keys_requests(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant
) -> None:
    key_id, _ = await new_key(client, tenant_a, "missed")
    # Follows no revocation: a process cut off from NATS when the revocation was appended.
    deaf = KeyCache()
    with deaf.watch(tenant_a.id, key_id) as revoked:
        await deaf.recheck(api.deps.pool)
        assert not revoked.done()
        r = await client.delete(f"/keys/{key_id}", headers=tenant_a.auth)
        assert r.status_code == 204, r.text

        async def cut() -> None:
            await deaf.recheck(api.deps.pool)
            assert revoked.done()

        await assert_eventually(cut, timeout=10)
    assert deaf.is_revoked(tenant_a.id, key_id)


async def test_a_key_whose_creation_answered_202_can_be_revoked_at_once(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    # A registry that lags: the creation reaches it a second after the 202.
    lagging = replace(api.deps, bus=_LateCommands(api.deps.bus, delay=1.0))
    impatient = replace(lagging, settings=replace(api.settings, read_your_writes_timeout=0.0))
    async with running_api(impatient) as url, httpx.AsyncClient(base_url=url) as hasty:
        r = await hasty.post("/keys", json={"name": "short-lived"}, headers=tenant_a.auth)
        assert r.status_code == 202, r.text
        key_id, key = r.json()["keyId"], r.json()["apiKey"]
        # Another tenant is not told about it.
        assert (await client.delete(f"/keys/{key_id}", headers=tenant_b.auth)).status_code == 404
        # The same process waits for the creation, then revokes.
        r = await client.delete(f"/keys/{key_id}", headers=tenant_a.auth)
        assert r.status_code == 204, r.text
    assert (await client.get("/agencies", headers=bearer(key))).status_code == 401
    assert (
        await client.delete("/keys/01nosuchkey0000000000000000", headers=tenant_a.auth)
    ).status_code == 404


async def test_rotating_a_key_issues_a_new_one_under_its_name_and_revokes_the_old(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    old_id, old_key = await new_key(client, tenant_a, "deploy")
    r = await client.post(f"/keys/{old_id}/rotate", headers=tenant_a.auth)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["replaces"] == old_id and body["name"] == "deploy"
    assert (await client.get("/agencies", headers=bearer(body["apiKey"]))).status_code == 200
    assert (await client.get("/agencies", headers=bearer(old_key))).status_code == 401
    again = await client.post(f"/keys/{old_id}/rotate", headers=tenant_a.auth)
    assert again.status_code == 409 and f"{old_id} is revoked" in again.json()["error"]
    # Revoking a revoked key is done already; a key the tenant never had is not found.
    assert (await client.delete(f"/keys/{old_id}", headers=tenant_a.auth)).status_code == 204
    assert (await client.get("/agencies", headers=bearer(old_key))).status_code == 401
    unknown = await client.post("/keys/01nosuchkey0000000000000000/rotate", headers=tenant_a.auth)
    assert unknown.status_code == 404


async def test_keys_of_another_tenant_cannot_be_seen_or_revoked(
    client: httpx.AsyncClient, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    key_id, key = await new_key(client, tenant_a, "mine")
    r = await client.delete(f"/keys/{key_id}", headers=tenant_b.auth)
    assert r.status_code == 404
    assert key_id not in {
        k["keyId"] for k in (await client.get("/keys", headers=tenant_b.auth)).json()
    }
    assert (await client.get("/agencies", headers=bearer(key))).status_code == 200
    assert (
        await client.get(f"/tenants/{tenant_a.id}/keys", headers=tenant_b.auth)
    ).status_code == 403
    bad = await client.delete("/keys/not.a.key", headers=tenant_a.auth)
    assert bad.status_code == 400


async def test_the_cli_lists_creates_rotates_and_revokes_a_tenants_keys(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant, tmp_path: Path
) -> None:
    api.write_endpoints(tmp_path)

    async def agency(*args: str) -> str:
        status, out, err = await run_agency("tenants", "keys", *args, "--data-dir", str(tmp_path))
        assert status == 0, err
        return out

    created = await agency("create", tenant_a.id, "--name", "ops")
    key_id = created.split()[2]
    key = created.split("api key")[1].split()[0]
    assert (await client.get("/agencies", headers=bearer(key))).status_code == 200
    assert key_id in await agency("ls", tenant_a.id)
    rotated = await agency("rotate", tenant_a.id, key_id)
    new = rotated.split("api key")[1].split()[0]
    assert (await client.get("/agencies", headers=bearer(key))).status_code == 401
    new_id = rotated.split()[2]
    assert f"revoked {new_id}" in await agency("revoke", tenant_a.id, new_id)
    assert (await client.get("/agencies", headers=bearer(new))).status_code == 401


async def test_the_admin_issues_nats_credentials_for_a_tenant_that_connect_at_once(
    client: httpx.AsyncClient, api: Api, tenant_a: Tenant, nats_server: NatsServer | None
) -> None:
    path = f"/tenants/{tenant_a.id}/nats-credentials"
    unmanaged = await client.post(path, headers=api.admin)
    assert unmanaged.status_code == 501 and "docs/nats.md" in unmanaged.json()["error"]
    if nats_server is None or nats_server.auth is None:
        return  # an external server's users are its operator's
    issuer = CredentialIssuer(nats_server.auth, nats_server.url)
    deps = replace(api.deps, nats_credentials=issuer)
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=30) as other:
        assert (await other.post(path, headers=tenant_a.auth)).status_code == 403
        missing = await other.post("/tenants/tnosuchtenant/nats-credentials", headers=api.admin)
        assert missing.status_code == 404
        r = await other.post(path, headers=api.admin)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["inboxPrefix"] == f"_INBOX_{tenant_a.id}"
    assert body["events"] == f"tenant.{tenant_a.id}.evt.>" and "@" not in body["servers"]
    nc = await nats.connect(
        servers=body["servers"].split(","), user=body["user"], password=body["password"],
        inbox_prefix=body["inboxPrefix"], connect_timeout=5,
    )  # fmt: skip
    await nc.close()


async def test_deleting_a_tenant_removes_its_nats_user_and_closes_its_connections(
    api: Api, tenant_a: Tenant, tenant_b: Tenant, nats_server: NatsServer | None
) -> None:
    if nats_server is None or nats_server.auth is None:
        return  # an external server's users are its operator's
    issuer = CredentialIssuer(nats_server.auth, nats_server.url)
    deps = replace(api.deps, nats_credentials=issuer)
    async with running_api(deps) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        issued = {}
        for tenant in (tenant_a, tenant_b):
            r = await http.post(f"/tenants/{tenant.id}/nats-credentials", headers=api.admin)
            assert r.status_code == 201, r.text
            issued[tenant.id] = r.json()

        async def connect(body: dict[str, str]) -> NATS:
            return await nats.connect(
                servers=body["servers"].split(","), user=body["user"],
                password=body["password"], inbox_prefix=body["inboxPrefix"],
                connect_timeout=5, allow_reconnect=False, error_cb=_quiet,
            )  # fmt: skip

        doomed, kept = await connect(issued[tenant_a.id]), await connect(issued[tenant_b.id])
        try:
            r = await http.delete(f"/tenants/{tenant_a.id}", headers=api.admin)
            assert r.status_code == 200, r.text

            async def closed() -> None:
                assert doomed.is_closed

            await assert_eventually(closed, timeout=15, interval=0.1)
            # Its user is gone from the server's users: its password opens nothing.
            assert f"tenant_{tenant_a.id}" not in nats_server.auth.conf_path.read_text()
            assert f"tenant_{tenant_b.id}" in nats_server.auth.conf_path.read_text()
            assert kept.is_connected  # another tenant's user is untouched
        finally:
            for nc in (doomed, kept):
                if not nc.is_closed:
                    await nc.close()


async def _quiet(_: Exception) -> None:
    return None
