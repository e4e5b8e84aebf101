"""Read models written by statements: a batch of envelopes becomes SQL with its arguments,
run in stream order, consecutive statements of the same SQL sent as one `executemany`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import asyncpg

from agency.contracts.envelope import Envelope
from agency.contracts.subjects import Aggregate
from agency.infra.jetstream.records import RecordedEvent
from agency.projections.projection import Projection

Statement = tuple[str, tuple[object, ...]]
StatementsFn = Callable[[Sequence[Envelope]], Iterable[Statement]]


def upsert(
    table: str, columns: Sequence[str], key: Sequence[str], *, kept: Sequence[str] = ()
) -> str:
    """SQL inserting a row of `columns` (arguments $1, $2, … in their order), or updating the
    row of the same `key` with them: every column but the key's and the `kept` ones (a
    creation time, say) takes the new value."""
    params = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in (*key, *kept))
    return (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({params}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
    )


@dataclass(frozen=True, eq=False)
class Table:
    """A read model's table, described once: its `columns` in order, each with its SQL type
    and constraints, its primary `key`, the columns an upsert leaves as first written
    (`kept`), and the DDL that follows its creation (`then`: indexes, columns added since,
    which no upsert writes). It makes the table's DDL and the SQL that upserts or deletes
    its rows."""

    name: str
    columns: Mapping[str, str]
    key: tuple[str, ...]
    kept: tuple[str, ...] = ()
    then: str = ""

    @property
    def ddl(self) -> str:
        width = max(map(len, self.columns))
        lines = [f"    {column.ljust(width)} {sql}" for column, sql in self.columns.items()]
        lines.append(f"    PRIMARY KEY ({', '.join(self.key)})")
        body = ",\n".join(lines)
        return f"\nCREATE TABLE IF NOT EXISTS {self.name} (\n{body}\n);\n{self.then}"

    @property
    def upsert(self) -> str:
        """Every column, $1, $2, … in their order (`upsert`)."""
        return upsert(self.name, tuple(self.columns), self.key, kept=self.kept)

    def delete(self, *where: str) -> str:
        """SQL deleting the rows whose `where` columns (by default the key's) equal $1, $2, …"""
        match = " AND ".join(f"{c} = ${i}" for i, c in enumerate(where or self.key, 1))
        return f"DELETE FROM {self.name} WHERE {match}"


async def execute_in_order(conn: asyncpg.Connection, statements: Iterable[Statement]) -> None:
    """Run statements in order; consecutive runs of the same SQL go as one executemany."""
    sql: str | None = None
    group: list[tuple[object, ...]] = []
    for next_sql, args in statements:
        if next_sql != sql and group:
            await conn.executemany(sql, group)
            group = []
        sql = next_sql
        group.append(args)
    if group:
        await conn.executemany(sql, group)


def statement_projection(
    name: str,
    ddl: str,
    statements: StatementsFn,
    handles: Iterable[str],
    *,
    tables: tuple[str, ...] = (),
    aggregate: Aggregate | None = None,
) -> Projection:
    """The projection `name` of `tables` (by default the one table of its name): the events
    of the types it `handles` (of `aggregate`'s, when named) become `statements`, run in
    order."""

    async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
        envelopes = [e.envelope for e in events]
        if aggregate is not None:
            envelopes = [env for env in envelopes if env.aggregate == aggregate]
        await execute_in_order(conn, statements(envelopes))

    return Projection(
        name=name, tables=tables or (name,), ddl=ddl, apply=apply, handles=frozenset(handles)
    )
