"""Settings structs read from the environment: each field from `<prefix><FIELD>`."""

from __future__ import annotations

import os
from typing import TypeVar

import msgspec

S = TypeVar("S", bound=msgspec.Struct)


def from_environ(cls: type[S], prefix: str) -> S:
    """`cls` with each field read from the variable `prefix` + its name in capitals
    (converted to the field's type) when that is set, its default when not; checked as the
    struct checks itself, the error naming the variables."""
    names = {field: prefix + field.upper() for field in cls.__struct_fields__}
    given = {field: os.environ[name] for field, name in names.items() if name in os.environ}
    try:
        return msgspec.convert(given, cls, strict=False)
    except msgspec.ValidationError as e:
        shown = ", ".join(f"{names[field]}={value!r}" for field, value in given.items())
        raise ValueError(f"{e} (from {shown})") from e
