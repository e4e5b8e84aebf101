"""Where each projection has seen every aggregate up to: the per-aggregate sequence that
tells a hole in the log (a gap) from an event applied in order.

Each projection keeps its own positions table (`Projection.positions_table`), moved in the
transaction that applies the events. Projections that take the same events (the projector
group's, at one checkpoint) move theirs in one statement.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from agency.infra.jetstream.records import RecordedEvent
from agency.projections.errors import ProjectionGap
from agency.projections.projection import Projection

Key = tuple[str, str, str]


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


Jump = tuple[Key, int, int]


def _ranges(events: Sequence[RecordedEvent]) -> tuple[dict[Key, int], dict[Key, int], list[Jump]]:
    """Each aggregate's first and last sequence in `events`, and where its sequence jumps
    inside them (the aggregate, the sequence expected, the one found)."""
    first: dict[Key, int] = {}
    last: dict[Key, int] = {}
    jumps: list[Jump] = []
    for e in events:
        env = e.envelope
        key: Key = (env.tenant_id, env.aggregate, env.aggregate_id)
        previous = last.get(key)
        if previous is None:
            first[key] = env.seq
        elif env.seq != previous + 1:
            jumps.append((key, previous + 1, env.seq))
        last[key] = env.seq
    return first, last, jumps


async def advance_positions(
    conn: asyncpg.Connection, projections: Sequence[Projection], events: Sequence[RecordedEvent]
) -> dict[str, list[ProjectionGap]]:
    """Move every projection's positions past `events`, inside the caller's transaction
    (search_path set), in one statement; the gaps each projection finds, by name.

    Every part of a WITH reads the same snapshot, so each `known` holds a table's positions
    as they were before its upsert moved them.
    """
    first, last, jumps = _ranges(events)
    parts: list[str] = []
    for index, projection in enumerate(projections):
        table = quote_ident(projection.positions_table)
        parts.append(
            f"k{index} AS (SELECT {index} AS p, tenant_id, aggregate, aggregate_id, seq "
            f"FROM {table} WHERE (tenant_id, aggregate, aggregate_id) IN "
            "(SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))), "
            f"m{index} AS (INSERT INTO {table} (tenant_id, aggregate, aggregate_id, seq) "
            "SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) "
            "ON CONFLICT (tenant_id, aggregate, aggregate_id) DO UPDATE SET seq = EXCLUDED.seq)"
        )
    known = " UNION ALL ".join(f"SELECT * FROM k{i}" for i in range(len(projections)))
    rows = await conn.fetch(
        f"WITH {', '.join(parts)} {known}",
        [k[0] for k in last],
        [k[1] for k in last],
        [k[2] for k in last],
        list(last.values()),
    )
    seen: list[dict[Key, int]] = [{} for _ in projections]
    for r in rows:
        seen[r["p"]][(r["tenant_id"], r["aggregate"], r["aggregate_id"])] = r["seq"]
    gaps: dict[str, list[ProjectionGap]] = {}
    for projection, positions in zip(projections, seen, strict=True):
        found = [ProjectionGap(projection.name, ".".join(k), a, b) for k, a, b in jumps]
        for key, seq in first.items():
            expected = positions.get(key, 0) + 1
            if seq != expected:
                found.append(ProjectionGap(projection.name, ".".join(key), expected, seq))
        gaps[projection.name] = found
    return gaps
