"""Keys that seal a thread's content: operator key → tenant keys → thread data keys
(docs/data.md). `ensure_cipher` installs the process's cipher when it connects to NATS.

The cipher (and with it the NATS client) is imported where a cipher is made, so a command
that only reads the operator key (`operator.py`) loads neither."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlsplit

from agency.contracts.ids import new_id
from agency.contracts.sealed import install_cipher, installed_cipher
from agency.infra.keystore.operator import operator_keys

if TYPE_CHECKING:
    from agency.infra.keystore.cipher import ThreadCipher

ENCRYPTION_VARIABLE = "AGENCY_ENCRYPTION"


def encryption_enabled() -> bool:
    """Sealing is on unless `AGENCY_ENCRYPTION` is `off` (events are then written in clear;
    sealed events already stored are still read while a key store is reachable)."""
    return os.environ.get(ENCRYPTION_VARIABLE, "on").strip().lower() not in {"off", "0", "false"}


def _servers(url: str) -> tuple[str, ...]:
    return tuple(sorted(urlsplit(u.strip()).netloc.rpartition("@")[2] for u in url.split(",")))


class _Held:
    """The ciphers of the connections open in this process, in the order they opened; the
    newest is installed, and one goes (closed) with the last connection that used it."""

    stack: ClassVar[list[ThreadCipher]] = []


def ensure_cipher(url: str) -> ThreadCipher | None:
    """Install the cipher for the NATS servers at `url` (one per servers in a process) for
    a connection opening; `release_cipher` when it closes."""
    if not encryption_enabled():
        return None
    from agency.infra.keystore.cipher import ThreadCipher

    found = [c for c in _Held.stack if _servers(c.url) == _servers(url)]
    cipher = found[0] if found else ThreadCipher(url, operator_keys())
    _Held.stack.append(cipher)
    install_cipher(cipher)
    return cipher


def release_cipher(cipher: ThreadCipher | None) -> None:
    """A connection using `cipher` closed: the cipher closes with its last connection, and
    the newest one still held is installed again."""
    if cipher is None or cipher not in _Held.stack:
        return
    stack = _Held.stack
    del stack[len(stack) - 1 - stack[::-1].index(cipher)]
    if cipher not in stack:
        cipher.close()
    install_cipher(stack[-1] if stack else None)


def current_cipher() -> ThreadCipher | None:
    from agency.infra.keystore.cipher import ThreadCipher

    cipher = installed_cipher()
    return cipher if isinstance(cipher, ThreadCipher) else None


def new_root_id(tenant_id: str) -> str:
    """A new root thread's id: the process's cipher may hold one whose data key is made
    already (`key_pool.py`); else, or with no cipher, a new ULID."""
    cipher = current_cipher()
    return cipher.new_root_id(tenant_id) if cipher is not None else new_id()
