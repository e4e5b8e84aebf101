"""Values sealed with a tenant's key: settings of the tenant's own that travel in its log
but never in clear (its model provider keys, `tenant.provider_set`; docs/data.md).

A token `tk1.<base64url>` is AES-GCM (nonce + ciphertext) under the tenant's settings data
key, `data.<tenant>.=settings` in the key store, which the tenant's key wraps like every
data key of its threads (a thread id never holds `=`): a rotation rewraps it, and the
tenant's deletion, which destroys the tenant key, leaves nothing the deployment holds that
opens it. Each token is bound to the tenant and to what it is (`context`), so it opens
nowhere else.

A token of another shape (a Fernet token) was sealed with `AGENCY_VARIABLES_KEY`
(`infra/sealing.py`): by a version before these, or by a process writing in clear
(`AGENCY_ENCRYPTION=off`, with no key store); it is opened with that key.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from agency.contracts.errors import DecodeError
from agency.contracts.sealed import PayloadErased
from agency.infra.keystore import current_cipher
from agency.infra.sealing import UnsealError, seal, unseal

PREFIX = "tk1."
# The data key of the tenant's settings: a name no thread id can take.
SETTINGS_KEY = "=settings"


def _aad(tenant_id: str, context: str) -> bytes:
    return f"{tenant_id}|settings|{context}".encode()


def sealed_with_tenant_key(token: str) -> bool:
    """Whether the token was sealed with its tenant's key (else with the variables key)."""
    return token.startswith(PREFIX)


async def seal_for_tenant(tenant_id: str, context: str, values: Mapping[str, str]) -> str:
    """The values as one token under the tenant's key; with the variables key when this
    process writes in clear (no key store). An empty map seals to the empty string."""
    if not values:
        return ""
    cipher = current_cipher()
    if cipher is None:
        return seal(values)
    await cipher.prepare(tenant_id, SETTINGS_KEY)
    plain = json.dumps(dict(values), sort_keys=True).encode()
    data = cipher.seal(tenant_id, SETTINGS_KEY, plain, _aad(tenant_id, context))
    return PREFIX + base64.urlsafe_b64encode(data).decode()


def open_for_tenant(tenant_id: str, context: str, token: str) -> dict[str, str]:
    """The values of a token `seal_for_tenant` made (or an older one, sealed with the
    variables key). `UnsealError` when this process cannot open it: the tenant was
    deleted (its key destroyed), or it has no key store."""
    if not token:
        return {}
    if not sealed_with_tenant_key(token):
        return unseal(token)
    cipher = current_cipher()
    if cipher is None:
        raise UnsealError(
            "sealed with the tenant's key, and this process has no key store "
            "(AGENCY_ENCRYPTION is off)"
        )
    try:
        data = base64.urlsafe_b64decode(token.removeprefix(PREFIX))
        plain = cipher.open(tenant_id, SETTINGS_KEY, data, _aad(tenant_id, context))
        opened = json.loads(plain)
    except (PayloadErased, DecodeError, ValueError) as e:
        raise UnsealError(f"sealed with the tenant's key, which cannot open it: {e}") from None
    if not isinstance(opened, dict):
        raise UnsealError("sealed values are not a map")
    return {str(k): str(v) for k, v in opened.items()}
