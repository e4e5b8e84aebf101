"""The default tenant `agency up` creates on loopback, so a first run has a key to use, and
its agency named `default`, where the CLI and the LangGraph routes work unless told another."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import msgspec

from agency.contracts.commands import CreateTenant
from agency.projections.agency_queries import tenant_for_key
from agency.services.api.auth import hash_key, key_id_of, mint_api_key
from agency.services.api.deps import ApiDeps


class Credentials(msgspec.Struct, kw_only=True):
    """Kept in the data directory so a restart keeps the same tenant and keys."""

    admin_secret: str
    tenant_id: str | None = None
    api_key: str | None = None


def load_credentials(directory: Path) -> Credentials:
    path = directory / "credentials.json"
    if path.exists():
        return msgspec.json.decode(path.read_bytes(), type=Credentials)
    secret = os.environ.get("AGENCY_ADMIN_SECRET") or "adm_" + secrets.token_urlsafe(24)
    return Credentials(admin_secret=secret)


def save_credentials(directory: Path, credentials: Credentials) -> None:
    path = directory / "credentials.json"
    # Written aside and renamed: a crash mid-write never leaves a file the next start can't read.
    staging = path.with_suffix(".tmp")
    staging.write_bytes(msgspec.json.encode(credentials))
    staging.chmod(0o600)
    staging.replace(path)


async def ensure_default_tenant(
    deps: ApiDeps, credentials: Credentials, directory: Path
) -> Credentials:
    """The default tenant and its key, created once.

    The key is saved before the tenant is created, and the create command's idempotency key
    is derived from it: a first start cut short anywhere sends the same command again on the
    next start, which the registry recognises, instead of minting a key it would refuse.
    """
    if credentials.tenant_id and credentials.api_key:
        key = credentials.api_key
        key_id = key_id_of(key)
        if key_id is None:
            raise ValueError(f"{directory / 'credentials.json'} holds a malformed api key")
        key_hash = hash_key(key)
        async with deps.pool.acquire() as conn:
            if await tenant_for_key(conn, key_id, key_hash) == credentials.tenant_id:
                return credentials
    else:
        key, key_id, key_hash = mint_api_key()
        credentials = Credentials(
            admin_secret=credentials.admin_secret, tenant_id="default", api_key=key
        )
        save_credentials(directory, credentials)
    tenant_id = credentials.tenant_id
    assert tenant_id is not None
    await deps.bus.commands.send(
        tenant_id,
        CreateTenant(name="default", key_id=key_id, key_hash=key_hash),
        idempotency_key=f"bootstrap-{key_id}",
    )
    async with asyncio.timeout(30):
        while True:
            async with deps.pool.acquire() as conn:
                if await tenant_for_key(conn, key_id, key_hash) == tenant_id:
                    break
            await asyncio.sleep(0.1)
    return credentials
