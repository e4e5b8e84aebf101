"""Every event as stored, for the events route, replay views and the dashboard."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from agency.infra.jetstream.records import RecordedEvent
from agency.projections.projection import Projection

DDL = """
CREATE TABLE IF NOT EXISTS events (
    tenant_id      text        NOT NULL,
    aggregate      text        NOT NULL,
    aggregate_id   text        NOT NULL,
    seq            bigint      NOT NULL,
    stream_seq     bigint      NOT NULL,
    event_id       text        NOT NULL,
    type           text        NOT NULL,
    ts             timestamptz NOT NULL,
    agency_id      text,
    run_id         text,
    correlation_id text,
    envelope       jsonb       NOT NULL,
    PRIMARY KEY (tenant_id, aggregate, aggregate_id, seq)
);
CREATE INDEX IF NOT EXISTS events_by_correlation ON events (tenant_id, correlation_id, stream_seq);
"""

INSERT = """
INSERT INTO events (tenant_id, aggregate, aggregate_id, seq, stream_seq, event_id, type, ts,
                    agency_id, run_id, correlation_id, envelope)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
"""


def event_row(e: RecordedEvent) -> tuple[object, ...]:
    env = e.envelope
    return (
        env.tenant_id,
        env.aggregate,
        env.aggregate_id,
        env.seq,
        e.stream_seq,
        env.event_id,
        env.type,
        env.ts,
        env.agency_id,
        env.run_id,
        env.correlation_id,
        e.raw.decode(),
    )


async def apply(conn: asyncpg.Connection, events: Sequence[RecordedEvent]) -> None:
    await conn.executemany(INSERT, [event_row(e) for e in events])


PROJECTION = Projection(name="events", tables=("events",), ddl=DDL, apply=apply)
