"""Sealed variables: values that travel in the log but never in clear.

Scoped variables handed to a subagent (`scopedEnv`, and the values posted to
`/threads/{t}/variables/{r}`) are facts of the log, so replay and fork keep them, but they
may be secrets: they are stored as one Fernet token (AES-128-CBC with an HMAC-SHA256)
holding the JSON of the name → value map. The key is derived (SHA-256) from
`AGENCY_VARIABLES_KEY`, which every runtime, subagents and API process must share.
`agency up` and `agency serve` on one data directory share a key generated there
(`variables-key`, mode 0600) unless the variable is set. A process with neither uses a
built-in development key and logs a warning once: the values are then only obscured.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import structlog
from cryptography.fernet import Fernet, InvalidToken

log = structlog.get_logger(__name__)

KEY_VARIABLE = "AGENCY_VARIABLES_KEY"
KEY_FILE = "variables-key"
_DEVELOPMENT_SECRET = "agency-development-variables-key"


class UnsealError(Exception):
    """A sealed value this process cannot open (another deployment's key, or garbage)."""


@cache
def _fernet(secret: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest()))


def _key() -> Fernet:
    return _fernet(
        secret_or_development(KEY_VARIABLE, _DEVELOPMENT_SECRET, "scoped variables are sealed")
    )


def secret_or_development(variable: str, development: str, guarded: str) -> str:
    """The secret in the environment's `variable`, else the built-in `development` one,
    with a warning, once per variable, that what it guards (`guarded`: "tenant keys are
    wrapped") is then only obscured."""
    secret = os.environ.get(variable, "")
    if secret:
        return secret
    _warn_once(variable, guarded)
    return development


@cache
def _warn_once(variable: str, guarded: str) -> None:
    log.warning(f"{variable} is not set: {guarded} with a development key")


def use_key_of(directory: Path) -> None:
    """Unless `AGENCY_VARIABLES_KEY` is set, take the data directory's key (made on first
    use, readable by its owner only) for this process and the services it starts."""
    if os.environ.get(KEY_VARIABLE):
        return
    os.environ[KEY_VARIABLE] = key_in(directory)


def key_in(directory: Path, name: str = KEY_FILE, variable: str = KEY_VARIABLE) -> str:
    """The directory's key, made there if it has none. Processes starting together on one
    directory (`agency serve` of every service at once) all get the one that was made
    first: the file appears whole (written aside, then linked in place), never empty."""
    path = directory / name
    secret = _read(path)
    if secret is not None:
        return secret
    directory.mkdir(parents=True, exist_ok=True)
    aside = directory / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
        # Another process may have made it first: then theirs is the key.
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        secret = _read(path)
    finally:
        aside.unlink(missing_ok=True)
    if secret is None:
        raise RuntimeError(f"{path} is there but empty: remove it, or set {variable}")
    return secret


def _read(path: Path) -> str | None:
    """The key in the file; None when there is no file, or (made by an older version
    that was stopped while writing it) an empty one."""
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


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


def unseal_all(tokens: Iterable[str]) -> dict[str, str]:
    """The values of several tokens in order, the latest value of each name (the variables
    provided for a thread's subagents: `ThreadState.provided_sealed`)."""
    values: dict[str, str] = {}
    for token in tokens:
        values.update(unseal(token))
    return values
