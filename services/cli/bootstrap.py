"""The default tenant `agency up` creates on loopback, so a first run has a key to use."""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import msgspec
from projections.queries import tenant_for_key

from contracts.commands import CreateTenant
from contracts.ids import new_id
from services.api.auth import mint_api_key
from services.api.deps import ApiDeps


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
    path.write_bytes(msgspec.json.encode(credentials))
    path.chmod(0o600)


async def ensure_default_tenant(deps: ApiDeps, credentials: Credentials) -> Credentials:
    if credentials.tenant_id and credentials.api_key:
        return credentials
    tenant_id = "default"
    key, key_id, key_hash = mint_api_key()
    await deps.bus.commands.send(
        tenant_id,
        CreateTenant(name="default", key_id=key_id, key_hash=key_hash),
        idempotency_key=f"bootstrap-{new_id()}",
    )
    async with asyncio.timeout(30):
        while True:
            async with deps.pool.acquire() as conn:
                if await tenant_for_key(conn, key_id, key_hash) == tenant_id:
                    break
            await asyncio.sleep(0.1)
    return Credentials(admin_secret=credentials.admin_secret, tenant_id=tenant_id, api_key=key)
