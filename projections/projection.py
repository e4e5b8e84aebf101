"""What a projection is: a name, the events it handles, its tables and an asyncpg handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg

from agency.infra.jetstream.records import RecordedEvent

ApplyFn = Callable[[asyncpg.Connection, Sequence[RecordedEvent]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Projection:
    """A read model built from the log.

    `ddl` creates `tables` using unqualified names: the engine runs it, and `apply`, with
    `search_path` set to the schema being written, which is how a rebuild writes a shadow
    copy while the live one keeps serving. `apply` gets the handled events of one batch,
    in stream order, inside the transaction that also moves the checkpoint.
    """

    name: str
    tables: tuple[str, ...]
    ddl: str
    apply: ApplyFn
    handles: frozenset[str] = field(default_factory=frozenset)

    def wants(self, event_type: str) -> bool:
        return not self.handles or event_type in self.handles

    @property
    def positions_table(self) -> str:
        return f"{self.name}_positions"

    @property
    def all_tables(self) -> tuple[str, ...]:
        return (*self.tables, self.positions_table)
