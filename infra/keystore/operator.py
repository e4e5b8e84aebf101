"""The operator's key: the outermost key, which wraps every tenant's key.

`KeyWrapper` is the port a KMS would implement (wrap and unwrap a key, naming the key it
used); `LocalKeyWrapper` is the implementation over a secret the process holds:
`AGENCY_OPERATOR_KEY`, or the data directory's `operator-key` file that `agency up` and
`agency serve` make (mode 0600, like `variables-key`). A process with neither uses a
built-in development key and logs a warning once: thread data can still be erased (data
keys are destroyed), but the key store is then only as safe as the NATS server's disk.

While the operator key is rotated, a process also holds the previous one
(`AGENCY_OPERATOR_KEY_PREVIOUS`, or the data directory's `operator-key.previous`): it wraps
with the new key and opens what either wrapped (`KeyRing`, docs/data.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agency.contracts.errors import StructuredError
from agency.infra.sealing import key_in, secret_or_development

OPERATOR_KEY_VARIABLE = "AGENCY_OPERATOR_KEY"
OPERATOR_KEY_FILE = "operator-key"
PREVIOUS_KEY_VARIABLE = "AGENCY_OPERATOR_KEY_PREVIOUS"
PREVIOUS_KEY_FILE = "operator-key.previous"
_DEVELOPMENT_SECRET = "agency-development-operator-key"
NONCE_BYTES = 12


class KeyUnwrapError(StructuredError):
    """A wrapped key that this wrapper cannot open (another operator key, or garbage)."""

    what: str
    wrapper_id: str
    message = (
        "cannot unwrap {what} with operator key {wrapper_id!r}: "
        f"set {OPERATOR_KEY_VARIABLE} to the key it was wrapped with"
    )


class KeyWrapper(Protocol):
    """Wraps keys under the operator's key (a KMS key, or a local secret)."""

    @property
    def key_id(self) -> str: ...

    def wrap(self, key: bytes, context: bytes) -> bytes: ...

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes: ...


def seal_key(kek: bytes, key: bytes, context: bytes) -> bytes:
    """`key` under the key-encryption key `kek`: nonce + AES-GCM ciphertext."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    return nonce + AESGCM(kek).encrypt(nonce, key, context)


def open_key(kek: bytes, wrapped: bytes, context: bytes) -> bytes:
    """Raises `InvalidTag` when `kek` or `context` is not the one it was sealed with."""
    return AESGCM(kek).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], context)


class LocalKeyWrapper:
    """The operator key as a secret of this process; its id is a digest of the key, so a
    wrapped key names the operator key it needs without revealing it."""

    def __init__(self, secret: str) -> None:
        self._kek = hashlib.sha256(secret.encode()).digest()
        self._id = "local:" + hashlib.sha256(b"id|" + self._kek).hexdigest()[:16]

    @property
    def key_id(self) -> str:
        return self._id

    def wrap(self, key: bytes, context: bytes) -> bytes:
        return seal_key(self._kek, key, context)

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        try:
            return open_key(self._kek, wrapped, context)
        except InvalidTag as e:
            raise KeyUnwrapError(context.decode(errors="replace"), self._id) from e


class KeyRing:
    """The operator key that wraps (`current`) and those that still open what they wrapped
    while a rotation is under way (`previous`), each found by the id a wrapped key names."""

    def __init__(self, current: KeyWrapper, previous: tuple[KeyWrapper, ...] = ()) -> None:
        self.current = current
        self.previous = tuple(p for p in previous if p.key_id != current.key_id)

    @property
    def key_id(self) -> str:
        return self.current.key_id

    def wrap(self, key: bytes, context: bytes) -> bytes:
        return self.current.wrap(key, context)

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """Open `wrapped` with whichever key of the ring wrapped it."""
        try:
            return self.current.unwrap(wrapped, context)
        except KeyUnwrapError:
            for wrapper in self.previous:
                with contextlib.suppress(KeyUnwrapError):
                    return wrapper.unwrap(wrapped, context)
            raise

    def unwrap_by(self, key_id: str, wrapped: bytes, context: bytes) -> bytes:
        """Open `wrapped` with the key named `key_id` (the current one when it names none
        this ring holds, whose failure then says which key is needed)."""
        for wrapper in (self.current, *self.previous):
            if wrapper.key_id == key_id:
                return wrapper.unwrap(wrapped, context)
        try:
            return self.current.unwrap(wrapped, context)
        except KeyUnwrapError as e:
            raise KeyUnwrapError(e.what, key_id) from e


def operator_wrapper() -> LocalKeyWrapper:
    """The process's operator key: `AGENCY_OPERATOR_KEY`, else the development key."""
    return LocalKeyWrapper(
        secret_or_development(OPERATOR_KEY_VARIABLE, _DEVELOPMENT_SECRET, "tenant keys are wrapped")
    )


def operator_keys() -> KeyRing:
    """The process's operator key, with the previous one while a rotation is under way
    (`AGENCY_OPERATOR_KEY_PREVIOUS`)."""
    previous = os.environ.get(PREVIOUS_KEY_VARIABLE, "").strip()
    return KeyRing(operator_wrapper(), (LocalKeyWrapper(previous),) if previous else ())


def use_operator_key_of(directory: Path) -> None:
    """Unless `AGENCY_OPERATOR_KEY` is set, take the data directory's `operator-key` (made
    on first use, readable by its owner only) for this process and those it starts, and
    its `operator-key.previous` while a rotation left one."""
    if os.environ.get(OPERATOR_KEY_VARIABLE):
        return
    os.environ[OPERATOR_KEY_VARIABLE] = key_in(directory, OPERATOR_KEY_FILE, OPERATOR_KEY_VARIABLE)
    previous = directory / PREVIOUS_KEY_FILE
    if not os.environ.get(PREVIOUS_KEY_VARIABLE) and previous.exists():
        os.environ[PREVIOUS_KEY_VARIABLE] = previous.read_text().strip()


def use_existing_operator_key(directory: Path) -> None:
    """As `use_operator_key_of`, for a command talking to a system already running on the
    directory: its key when it has one, none made."""
    if not os.environ.get(OPERATOR_KEY_VARIABLE) and (directory / OPERATOR_KEY_FILE).exists():
        use_operator_key_of(directory)
