"""Answers filled from database rows whose columns bear their fields' names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import asyncpg
import msgspec

AnswerT = TypeVar("AnswerT", bound=msgspec.Struct)


def from_row(cls: type[AnswerT], row: asyncpg.Record | Mapping[str, Any], **given: Any) -> AnswerT:
    """`cls` with the fields in `given` as given and every other from its column in `row`."""
    columns = {name: row[name] for name in cls.__struct_fields__ if name not in given}
    return cls(**columns, **given)
