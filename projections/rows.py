"""Answers filled from database rows whose columns bear their fields' names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import asyncpg
import msgspec

AnswerT = TypeVar("AnswerT", bound=msgspec.Struct)
T = TypeVar("T")


def from_row(cls: type[AnswerT], row: asyncpg.Record | Mapping[str, Any], **given: Any) -> AnswerT:
    """`cls` with the fields in `given` as given and every other from its column in `row`."""
    columns = {name: row[name] for name in cls.__struct_fields__ if name not in given}
    return cls(**columns, **given)


async def fetch_all(
    conn: asyncpg.Connection, into: Callable[[asyncpg.Record], T], query: str, *args: object
) -> list[T]:
    """Every row `query` answers, each made into an answer by `into`."""
    return [into(r) for r in await conn.fetch(query, *args)]
