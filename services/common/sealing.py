"""Sealed variables: values that travel in the log but never in clear.

Scoped variables handed to a subagent (`scopedEnv`, and the values posted to
`/threads/{t}/variables/{r}`) are facts of the log, so replay and fork keep them, but they
may be secrets: they are stored as one Fernet token (AES-128-CBC with an HMAC-SHA256)
holding the JSON of the name → value map. The key is derived (SHA-256) from
`AGENCY_VARIABLES_KEY`, which every runtime, subagents and API process must share. Without
it a built-in development key is used and a warning is logged once: the values are then
only obscured, not protected.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from functools import cache

import structlog
from cryptography.fernet import Fernet, InvalidToken

log = structlog.get_logger(__name__)

KEY_VARIABLE = "AGENCY_VARIABLES_KEY"
_DEVELOPMENT_SECRET = "agency-development-variables-key"


class UnsealError(Exception):
    """A sealed value this process cannot open (another deployment's key, or garbage)."""


@cache
def _fernet(secret: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest()))


def _key() -> Fernet:
    secret = os.environ.get(KEY_VARIABLE, "")
    if not secret:
        _warn_once()
        secret = _DEVELOPMENT_SECRET
    return _fernet(secret)


@cache
def _warn_once() -> None:
    log.warning(f"{KEY_VARIABLE} is not set: scoped variables are sealed with a development key")


def seal(values: Mapping[str, str]) -> str:
    """The values as one token; an empty map seals to the empty string."""
    if not values:
        return ""
    return _key().encrypt(json.dumps(dict(values), sort_keys=True).encode()).decode()


def unseal(token: str) -> dict[str, str]:
    if not token:
        return {}
    try:
        opened = json.loads(_key().decrypt(token.encode()))
    except (InvalidToken, ValueError) as e:
        raise UnsealError(f"sealed variables cannot be opened with this {KEY_VARIABLE}") from e
    if not isinstance(opened, dict):
        raise UnsealError("sealed variables are not a map")
    return {str(k): str(v) for k, v in opened.items()}
