"""How far behind the log each projection is."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg
from nats.js import JetStreamContext

from agency.projections.engine import CHECKPOINTS
from agency.projections.rebuild import last_stream_seq


@dataclass(frozen=True, slots=True)
class ProjectionStatus:
    name: str
    applied_seq: int
    last_seq: int
    status: str
    error: str | None
    updated_at: datetime | None

    @property
    def lag(self) -> int:
        """Events stored but not yet applied."""
        return max(self.last_seq - self.applied_seq, 0)


async def projection_statuses(
    conn: asyncpg.Connection, js: JetStreamContext, names: list[str]
) -> list[ProjectionStatus]:
    last = await last_stream_seq(js)
    rows = {
        r["name"]: r
        for r in await conn.fetch(
            f"SELECT name, stream_seq, status, error, updated_at FROM {CHECKPOINTS}"
        )
    }
    out = []
    for name in names:
        row = rows.get(name)
        out.append(
            ProjectionStatus(
                name=name,
                applied_seq=int(row["stream_seq"]) if row else 0,
                last_seq=last,
                status=str(row["status"]) if row else "not started",
                error=row["error"] if row else None,
                updated_at=row["updated_at"] if row else None,
            )
        )
    return out
