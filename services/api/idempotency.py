"""A request's idempotency key: from the body (`idempotencyKey`) or the `Idempotency-Key`
header, and the run an invoke's key names."""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Annotated

import msgspec
from litestar.exceptions import ValidationException
from litestar.params import HeaderParameter

IdempotencyKey = Annotated[
    str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
]
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


def key_header(description: str) -> HeaderParameter:
    """The optional `Idempotency-Key` header, documented as `description`."""
    return HeaderParameter(name="Idempotency-Key", required=False, description=description)


# The header of a request whose body may carry the key instead.
KeyHeader = Annotated[
    str | None, key_header("The request's idempotency key, when the body has none.")
]


def header_key(value: str | None) -> str | None:
    """The `Idempotency-Key` header's key, checked; 400 when it is not 1 to 200 printable
    ASCII characters without spaces."""
    if value is None:
        return None
    if not _KEY.match(value):
        raise ValidationException(
            "Idempotency-Key must be 1 to 200 printable ASCII characters without spaces"
        )
    return value


def run_id_for(tenant: str, thread_id: str, key: str) -> str:
    """The run an idempotency key starts: the same key always names the same run, so a
    repeat is answered without looking anything up."""
    digest = hashlib.sha256(f"{tenant}\x00{thread_id}\x00{key}".encode()).digest()
    return "run_" + base64.b32encode(digest).decode()[:26]
