"""A tenant's encryption key: `POST /tenants/{tenantId}/encryption-key/rotate` (admin).

The tenant key wraps the data keys of the tenant's threads (docs/data.md). Rotating it
makes a new one and rewraps each data key under it, the old one kept until every data key
is rewrapped; the log is not rewritten. A rotation stopped midway is finished by the next
request, which answers it (`resumed`).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from litestar import post
from litestar.exceptions import NotFoundException

from agency.contracts.http import Out
from agency.domain.tenant_life import is_live_tenant
from agency.infra.keystore.operator import operator_keys
from agency.infra.keystore.rotation import rotate_tenant
from agency.infra.keystore.vault import KeyVault
from agency.services.api.auth import ADMIN_OPT, Caller, Deps, path_id
from agency.services.api.idempotency import header_key, key_header
from agency.services.api.path_params import TenantId
from agency.services.api.routes_erasure import requester

RequestKey = Annotated[
    str | None, key_header("A repeat with the same key answers the rotation it made, none more.")
]


class EncryptionKeyRotationOut(Out, frozen=True, kw_only=True):
    """The tenant key's rotation: the new key's version, how many thread data keys were
    rewrapped under it, when and at whose request it began, and whether this request
    finished a rotation stopped earlier."""

    tenant_id: str
    # The rotation's `version`, named for what it is a version of.
    version: str = msgspec.field(name="keyVersion")
    rewrapped: int
    rotated_at: str
    rotated_by: str
    resumed: bool


@post(
    "/tenants/{tenantId:str}/encryption-key/rotate",
    status_code=200,
    opt={ADMIN_OPT: True},
    summary="Rotate a tenant's encryption key (admin)",
    description=(
        "A new tenant key; the data keys of the tenant's threads are rewrapped under it and "
        "the old key is dropped once all are. The log is not rewritten. A rotation stopped "
        "midway is finished by the next request (`resumed`); a repeat with the same "
        "`Idempotency-Key` answers the rotation it made (`resumed`)."
    ),
)
async def rotate_encryption_key(
    tenant_id: TenantId, principal: Caller, deps: Deps, idempotency_key: RequestKey = None
) -> EncryptionKeyRotationOut:
    tenant = path_id("tenant id", tenant_id)
    if not is_live_tenant(await deps.bus.store.read(tenant, "tenant", tenant)):
        raise NotFoundException(f"tenant {tenant} not found")
    vault = await KeyVault(deps.bus.js, operator_keys()).open()
    request_key = header_key(idempotency_key) or ""
    rotation = await rotate_tenant(vault, tenant, requester(principal), request_key)
    return msgspec.convert(rotation, EncryptionKeyRotationOut, from_attributes=True)


ENCRYPTION_ROUTES = [rotate_encryption_key]
