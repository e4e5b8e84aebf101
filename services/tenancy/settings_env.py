"""Settings structs read from the environment, each field from its own variable."""

from __future__ import annotations

import os
from typing import TypeVar

import msgspec

S = TypeVar("S", bound=msgspec.Struct)


def from_environ(cls: type[S], **variables: str) -> S:
    """`cls` with each field named in `variables` read from that environment variable
    (converted to the field's type) when it is set, the field's default when not; checked
    as the struct checks itself, the error naming the variable."""
    given = {field: os.environ[name] for field, name in variables.items() if name in os.environ}
    try:
        return msgspec.convert(given, cls, strict=False)
    except msgspec.ValidationError as e:
        names = ", ".join(
            f"{name}={given[field]!r}" for field, name in variables.items() if field in given
        )
        raise ValueError(f"{e} (from {names})") from e
