"""API keys: list, create, rotate and revoke, by the tenant itself (`/keys`) or by the
admin for any tenant (`/tenants/{tenantId}/keys`).

A new key is shown once, in the answer that creates it; only its sha256 is stored. A
rotation issues the new key and revokes the old one in one append. A revoked key is refused
by every API process as soon as the revocation is appended (`services/api/keys.py`), and
the requests still open with it are cut (`services/api/revocation.py`).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import Response, delete, get, post
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import JSONBody

from agency.contracts.commands import IssueApiKey, RevokeApiKey
from agency.contracts.events import ApiKeyIssued
from agency.contracts.http import Out
from agency.contracts.ids import new_id
from agency.domain.key_liveness import live_keys
from agency.domain.tenant_life import is_live_tenant
from agency.projections.keys import KeyView, list_keys
from agency.services.api.auth import ADMIN_OPT, Caller, Deps, mint_api_key, path_id, tenant_of
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.openapi import empty_response, error_response
from agency.services.api.path_params import KeyId, TenantId
from agency.services.api.readback import read_your_write, send_and_read
from agency.services.api.routes_commands import Body

KeyName = Annotated[str, msgspec.Meta(max_length=200)]


class CreateKeyBody(Body, frozen=True, kw_only=True):
    name: KeyName = ""


class KeyOut(Out, frozen=True, kw_only=True):
    """The new key: `apiKey` is shown here once and never again."""

    key_id: str
    api_key: str
    name: str
    replaces: str | None = None


class _Keys(msgspec.Struct, frozen=True):
    live: dict[str, str]  # id → name
    revoked: frozenset[str]


async def _keys(deps: ApiDeps, tenant: str) -> _Keys:
    """The tenant's live and revoked keys from the log; 404 when there is no such tenant."""
    history = await deps.bus.store.read(tenant, "tenant", tenant)
    if not is_live_tenant(history):
        raise NotFoundException(f"tenant {tenant} not found")
    live = live_keys(history)
    issued = {e.payload.key_id for e in history if isinstance(e.payload, ApiKeyIssued)}
    return _Keys(live=live, revoked=frozenset(issued - live.keys()))


async def _live(deps: ApiDeps, tenant: str, key_id: str) -> dict[str, str] | None:
    """The live keys, once `key_id` is among them; None when it was revoked. 404 for a
    key the tenant never had; a creation this process answered with 202 is waited for."""
    keys = await _keys(deps, tenant)
    if key_id in keys.revoked:
        return None
    if key_id not in keys.live:
        await _created(deps, tenant, key_id)
        keys = await _keys(deps, tenant)
    return keys.live if key_id in keys.live else None


async def _issue(
    deps: ApiDeps, tenant: str, name: str, replaces: str | None = None
) -> Response[KeyOut]:
    if replaces is not None:
        live = await _live(deps, tenant, replaces)
        if live is None:
            raise HTTPException(
                status_code=409, detail=f"API key {replaces} is revoked: it cannot be rotated"
            )
        name = name or live[replaces]
    else:
        await _keys(deps, tenant)  # 404 unless the tenant exists
    key, key_id, key_hash = mint_api_key()
    idempotency_key = new_id()
    command = IssueApiKey(key_id=key_id, key_hash=key_hash, name=name, replaces=replaces)
    written = await send_and_read(deps, tenant, "tenant", tenant, command, idempotency_key)
    if written.event is None:
        deps.keys.note_pending(tenant, key_id, idempotency_key)
    elif replaces is not None:
        deps.keys.revoke(tenant, replaces)
    body = KeyOut(key_id=key_id, api_key=key, name=name, replaces=replaces)
    return Response(body, status_code=201 if written.readable else 202)


async def _revoke(deps: ApiDeps, tenant: str, key_id: str) -> Response[None]:
    key_id = path_id("key id", key_id)
    if await _live(deps, tenant, key_id) is None:
        return Response(None, status_code=204)  # revoked already: nothing more to do
    idempotency_key = new_id()
    await deps.bus.commands.send(
        tenant, RevokeApiKey(key_id=key_id), idempotency_key=idempotency_key
    )
    written = await read_your_write(deps, tenant, "tenant", tenant, idempotency_key)
    if written.event is not None:
        deps.keys.revoke(tenant, key_id)
    return Response(None, status_code=204 if written.event is not None else 202)


async def _created(deps: ApiDeps, tenant: str, key_id: str) -> None:
    """Wait for a creation this process answered with 202; 404 for a key the tenant never
    had, 409 while the registry has still not recorded it."""
    pending = deps.keys.pending(tenant, key_id)
    if pending is None:
        raise NotFoundException(f"no live API key {key_id}")
    written = await read_your_write(deps, tenant, "tenant", tenant, pending)
    if written.event is None:
        raise HTTPException(
            status_code=409,
            detail=f"API key {key_id} is accepted but not recorded yet: try again shortly",
        )


async def _list(deps: ApiDeps, tenant: str) -> list[KeyView]:
    await _keys(deps, tenant)
    async with deps.pool.acquire() as conn:
        return await list_keys(conn, tenant)


# A key is revoked once its event is read back; past the wait, 202 says it is accepted.
REVOKED = {
    204: empty_response(
        "Revoked (or revoked already): every API process refuses the key from now on."
    ),
    202: empty_response("Accepted: the revocation is applied once the registry records it."),
    409: error_response(
        409, "The key's creation was accepted (202) but is not recorded yet: try again."
    ),
}


def _own(principal: Principal) -> str:
    return tenant_of(principal)


@get("/keys", summary="The caller's tenant's API keys, with names and last-used times")
async def own_keys(principal: Caller, deps: Deps) -> list[KeyView]:
    return await _list(deps, _own(principal))


@post(
    "/keys",
    status_code=201,
    summary="Create an API key of the caller's tenant",
)
async def create_own_key(
    data: JSONBody[CreateKeyBody], principal: Caller, deps: Deps
) -> Response[KeyOut]:
    return await _issue(deps, _own(principal), data.name)


@post(
    "/keys/{keyId:str}/rotate",
    status_code=201,
    summary="Replace a key: a new key is issued and the old one revoked at once",
)
async def rotate_own_key(key_id: KeyId, principal: Caller, deps: Deps) -> Response[KeyOut]:
    return await _issue(deps, _own(principal), "", path_id("key id", key_id))


@delete(
    "/keys/{keyId:str}",
    status_code=204,
    responses=REVOKED,
    summary="Revoke an API key of the caller's tenant",
)
async def revoke_own_key(key_id: KeyId, principal: Caller, deps: Deps) -> Response[None]:
    return await _revoke(deps, _own(principal), key_id)


@get("/tenants/{tenantId:str}/keys", opt={ADMIN_OPT: True}, summary="A tenant's API keys (admin)")
async def tenant_keys(tenant_id: TenantId, deps: Deps) -> list[KeyView]:
    return await _list(deps, path_id("tenant id", tenant_id))


@post(
    "/tenants/{tenantId:str}/keys",
    status_code=201,
    opt={ADMIN_OPT: True},
    summary="Create an API key of a tenant (admin)",
)
async def create_tenant_key(
    tenant_id: TenantId, data: JSONBody[CreateKeyBody], deps: Deps
) -> Response[KeyOut]:
    return await _issue(deps, path_id("tenant id", tenant_id), data.name)


@post(
    "/tenants/{tenantId:str}/keys/{keyId:str}/rotate",
    status_code=201,
    opt={ADMIN_OPT: True},
    summary="Rotate an API key of a tenant (admin)",
)
async def rotate_tenant_key(tenant_id: TenantId, key_id: KeyId, deps: Deps) -> Response[KeyOut]:
    return await _issue(deps, path_id("tenant id", tenant_id), "", path_id("key id", key_id))


@delete(
    "/tenants/{tenantId:str}/keys/{keyId:str}",
    status_code=204,
    responses=REVOKED,
    opt={ADMIN_OPT: True},
    summary="Revoke an API key of a tenant (admin)",
)
async def revoke_tenant_key(tenant_id: TenantId, key_id: KeyId, deps: Deps) -> Response[None]:
    return await _revoke(deps, path_id("tenant id", tenant_id), key_id)


class NatsCredentialsOut(Out, frozen=True, kw_only=True):
    """How a tenant's own services connect to NATS; the password is shown once."""

    tenant_id: str
    servers: str
    user: str
    password: str
    inbox_prefix: str
    commands: str
    events: str
    # The JetStream API prefix in the tenant's account (`nc.jetstream(prefix=…)`).
    js_api_prefix: str


@post(
    "/tenants/{tenantId:str}/nats-credentials",
    status_code=201,
    opt={ADMIN_OPT: True},
    responses={501: error_response(501)},
    summary="Issue NATS credentials for a tenant's own services (admin)",
    description=(
        "A user in an account of the tenant's own, which can publish the tenant's commands "
        "and read its events, with a private inbox prefix and a JetStream API prefix "
        "(`jsApiPrefix`). Issuing again replaces the password."
    ),
)
async def issue_nats_credentials(tenant_id: TenantId, deps: Deps) -> NatsCredentialsOut:
    tenant = path_id("tenant id", tenant_id)
    await _keys(deps, tenant)  # 404 unless the tenant exists
    if deps.nats_credentials is None:
        raise HTTPException(
            status_code=501,
            detail="this deployment's NATS users are managed outside Agency: give the "
            "tenant a user with the permissions docs/nats.md lists",
        )
    issued = await deps.nats_credentials.issue(tenant)
    return NatsCredentialsOut(servers=issued.servers, **msgspec.structs.asdict(issued.credentials))


KEY_ROUTES = [
    issue_nats_credentials,
    own_keys,
    create_own_key,
    rotate_own_key,
    revoke_own_key,
    tenant_keys,
    create_tenant_key,
    rotate_tenant_key,
    revoke_tenant_key,
]
