"""Event store and projection throughput against their raw ceilings, in one run.

- append: events appended with expected-sequence checks (envelope, atomic-batch headers,
  optimistic concurrency) against raw nats-py acked publishes of the same bytes, both with
  the same number of concurrent writers on the same server.
- project: the events projection applied from the log (read from JetStream, decode, gap
  tracking, checkpoint in the same transaction) against a raw asyncpg executemany of the
  same rows in batches of the same size into an identical table, on the same server.

Run: `just bench store` (options: --events N, --writers N).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import asyncpg
import uvloop

from agency.contracts.events import ChatMessage, MessageAppended
from agency.contracts.ids import new_id
from agency.infra.db import create_pool, migrate
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.infra.jetstream.streams import StreamSettings, event_stream, provision
from agency.projections.engine import ProjectionRunner
from agency.projections.readmodels import events as events_model
from agency.projections.rebuild import last_stream_seq
from bench.common import Stopwatch, embedded_servers, report

ROUNDS = 5


def message(i: int) -> MessageAppended:
    return MessageAppended(
        run_id="run-1",
        message=ChatMessage(role="assistant", content=f"step {i}: the model says something short"),
    )


async def bench_append(bus: Bus, events: int, writers: int) -> tuple[float, float]:
    tenant = "bench" + new_id()[-8:].lower()
    per_writer = events // writers // ROUNDS

    async def ours_writer() -> None:
        thread = new_id()
        position = Position()
        for i in range(per_writer):
            result = await bus.store.append(
                tenant, "thread", thread, [message(i)], expected=position
            )
            position = result.position

    # The raw side publishes the bytes of a real event to a stream configured like the events
    # stream, so the projection benchmark below reads only events of ours.
    raw_config = event_stream(StreamSettings())
    raw_config.name, raw_config.subjects = "BENCH_RAW", ["bench.raw.>"]
    await bus.js.add_stream(raw_config)
    sample = await bus.store.append(tenant, "thread", new_id(), [message(0)], expected=Position())
    body = sample.events[0].raw

    async def raw_writer() -> None:
        subject = f"bench.raw.{new_id()}"
        for _ in range(per_writer):
            await bus.js.publish(subject, body)

    # Alternate the two sides so disk flush hiccups hit both alike; report the medians.
    raw_rates: list[float] = []
    our_rates: list[float] = []
    for _ in range(ROUNDS):
        for writer, rates in ((raw_writer, raw_rates), (ours_writer, our_rates)):
            clock = Stopwatch()
            await asyncio.gather(*(writer() for _ in range(writers)))
            rates.append(per_writer * writers / clock.elapsed)
    ours, baseline = statistics.median(our_rates), statistics.median(raw_rates)
    return ours, baseline


async def bench_project(bus: Bus, pool: asyncpg.Pool, events: int) -> tuple[float, float]:
    tenant = "proj" + new_id()[-8:].lower()
    thread, position = new_id(), Position()
    for start in range(0, events, 500):
        batch = [message(i) for i in range(start, min(start + 500, events))]
        position = (
            await bus.store.append(tenant, "thread", thread, batch, expected=position)
        ).position
    recorded = await bus.store.read(tenant, "thread", thread)
    rows = [events_model.event_row(e) for e in recorded]

    async with pool.acquire() as conn:
        await conn.execute("CREATE SCHEMA IF NOT EXISTS bench_raw")
        await conn.execute("SET search_path TO bench_raw")
        await conn.execute(events_model.DDL)
        clock = Stopwatch()
        for start in range(0, len(rows), 1000):
            async with conn.transaction():
                await conn.executemany(events_model.INSERT, rows[start : start + 1000])
        baseline = len(rows) / clock.elapsed
        await conn.execute("RESET search_path")

    # The projection starts from the beginning of the stream; it reads everything stored.
    total = await last_stream_seq(bus.js)
    stop = asyncio.Event()
    runner = ProjectionRunner(pool, bus.js, events_model.PROJECTION, dead_letters=bus.dead_letters)
    clock = Stopwatch()
    task = asyncio.create_task(runner.run(stop))
    await runner.wait_until(total, timeout=600)
    elapsed = clock.elapsed
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    return total / elapsed, baseline


async def main() -> None:
    parser = argparse.ArgumentParser(prog="just bench store")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--writers", type=int, default=32)
    args = parser.parse_args()
    async with embedded_servers() as servers:
        print(
            f"store benchmark: {args.events} events, {args.writers} writers, "
            f"nats sync_interval={servers.sync_interval}",
            flush=True,
        )
        pool = await create_pool(servers.database_url, max_size=4)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
            async with Bus(servers.nats_url, name="bench") as bus:
                await provision(bus.js)
                ours, baseline = await bench_append(bus, args.events, args.writers)
                report("append", ours, baseline)
                ours, baseline = await bench_project(bus, pool, args.events)
                report("project", ours, baseline)
        finally:
            await pool.close()


if __name__ == "__main__":
    uvloop.run(main())
