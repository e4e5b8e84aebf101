"""Identifiers and the validation of every value that becomes a subject token."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time

from agency.contracts.errors import InvalidToken

MAX_TOKEN_LENGTH = 64

# NATS subject tokens are split on "." and "*" / ">" are wildcards; whitespace ends a subject.
# The allowed set is deliberately narrower than NATS permits so a token is also safe in
# file names, URLs and log lines.
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


# Crockford's base32 (no I, L, O, U), two characters for every 10 bits.
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_SHIFTS = tuple(range(120, -1, -10))


def new_id() -> str:
    """A ULID: sortable by creation time (ms), unique without coordination (80 random
    bits). Encoded here rather than through a ULID object: every event gets one, and the
    object costs twice as much."""
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def derived_id(prefix: str, *parts: str) -> str:
    """A deterministic id from the parts: the same inputs name the same thing, so a redelivered
    message re-creates nothing (a child thread spawned by a tool call, its first run)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return prefix + base64.b32encode(digest).decode().rstrip("=").lower()[:26]


def validate_token(kind: str, value: str) -> str:
    """Return `value` unchanged if it is a safe subject token, else raise `InvalidToken`."""
    if not isinstance(value, str):
        raise InvalidToken(kind, repr(value), "must be a string")
    if not value:
        raise InvalidToken(kind, value, "must not be empty")
    if len(value) > MAX_TOKEN_LENGTH:
        raise InvalidToken(kind, value, f"longer than {MAX_TOKEN_LENGTH} characters")
    if not _TOKEN.match(value):
        raise InvalidToken(
            kind,
            value,
            "only letters, digits, '-' and '_' are allowed "
            "(no '.', '*', '>', whitespace or other characters)",
        )
    return value


def is_valid_token(value: str) -> bool:
    try:
        validate_token("token", value)
    except InvalidToken:
        return False
    return True
