"""`agency projections rebuild|status`.

`rebuild --until-seq N` / `--until-time T` builds the read models as they were at that
moment into a scratch schema (`asof_<N>` / `asof_<time>`), never touching the live tables.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agency.services.cli.arguments import add_data_dir, command_group, running_endpoints

if TYPE_CHECKING:
    import asyncpg

    from agency.infra.jetstream.connection import Bus
    from agency.projections.projection import Projection


def register(groups: Any) -> None:
    sub = command_group(groups, "projections", "read models built from the log")
    rb = sub.add_parser("rebuild", help="drop and rebuild read models from sequence 1")
    rb.add_argument("name", nargs="?", default=None, help="one projection (default: all)")
    moment = rb.add_mutually_exclusive_group()
    moment.add_argument(
        "--until-seq",
        type=int,
        default=None,
        help="build the read models as of this stream sequence, into schema asof_<seq> "
        "(the live tables are not touched)",
    )
    moment.add_argument(
        "--until-time",
        type=_timestamp,
        default=None,
        help="build the read models as of this ISO 8601 time (UTC unless it names a zone), "
        "into schema asof_<time>",
    )
    add_data_dir(rb)
    rb.set_defaults(handler=projections_rebuild)
    st = sub.add_parser("status", help="each projection's position and lag")
    add_data_dir(st)
    st.set_defaults(handler=projections_status)


class ProgressBar:
    """A one-line bar on a tty; periodic lines elsewhere so logs stay readable."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._tty = sys.stderr.isatty()
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < (0.1 if self._tty else 2.0):
            return
        self._last = now
        fraction = done / total if total else 1.0
        filled = int(fraction * 30)
        bar = "#" * filled + "-" * (30 - filled)
        line = f"{self._label:<16} [{bar}] {done}/{total} ({fraction:.0%})"
        if self._tty:
            print("\r" + line, end="\n" if done >= total else "", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)


async def projections_rebuild(args: argparse.Namespace) -> int:
    from agency.infra.db import create_pool
    from agency.infra.jetstream.connection import Bus
    from agency.projections.catalog import ALL, by_name
    from agency.projections.errors import ProjectionError
    from agency.projections.rebuild import rebuild

    try:
        chosen = [by_name(args.name)] if args.name else list(ALL)
    except ProjectionError as e:
        print(f"agency: {e}", file=sys.stderr)
        return 2
    endpoints = running_endpoints(args)
    if args.until_seq is not None and args.until_seq < 0:
        print("agency: --until-seq must be 0 or more", file=sys.stderr)
        return 2
    pool = await create_pool(endpoints.database_url)
    try:
        async with Bus(endpoints.nats_url, name="agency-rebuild") as bus:
            if args.until_seq is not None and bus.layout.partitioned:
                print(
                    f"agency: --until-seq names one stream's sequence; the events log has "
                    f"{bus.layout.partitions} partitions: use --until-time",
                    file=sys.stderr,
                )
                return 2
            if args.until_seq is not None or args.until_time is not None:
                await _rebuild_as_of(pool, bus, chosen, args.until_seq, args.until_time)
                return 0
            for projection in chosen:
                started = time.monotonic()
                result = await rebuild(
                    pool,
                    bus.js,
                    projection,
                    progress=ProgressBar(projection.name),
                    layout=bus.layout,
                )
                print(
                    f"{projection.name}: rebuilt up to stream seq {result.applied_upto} "
                    f"in {time.monotonic() - started:.1f} s"
                )
    finally:
        await pool.close()
    return 0


def _timestamp(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not an ISO 8601 time (e.g. 2025-01-31T12:00:00Z)"
        ) from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def scratch_schema(until_seq: int | None, until_time: datetime | None) -> str:
    """`asof_<seq>` or `asof_<UTC time, to the microsecond>`: one schema per moment."""
    if until_seq is not None:
        return f"asof_{until_seq}"
    assert until_time is not None
    return "asof_" + until_time.astimezone(UTC).strftime("%Y%m%dt%H%M%S%fz")


async def _rebuild_as_of(
    pool: asyncpg.Pool,
    bus: Bus,
    chosen: list[Projection],
    until_seq: int | None,
    until_time: datetime | None,
) -> None:
    from agency.projections.positions import quote_ident
    from agency.projections.rebuild import build_scratch

    schema = scratch_schema(until_seq, until_time)
    async with pool.acquire() as conn:
        await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
        await conn.execute(f"CREATE SCHEMA {quote_ident(schema)}")
    for projection in chosen:
        started = time.monotonic()
        # build_scratch starts by dropping its schema: each projection is built in a
        # schema of its own, then its tables move into the shared one.
        staging = f"{schema}__{projection.name}"
        result = await build_scratch(
            pool,
            bus.js,
            projection,
            staging,
            until_seq=until_seq,
            until_time=until_time,
            progress=ProgressBar(projection.name),
            layout=bus.layout,
        )
        async with pool.acquire() as conn, conn.transaction():
            for table in projection.all_tables:
                await conn.execute(
                    f"ALTER TABLE {quote_ident(staging)}.{quote_ident(table)} "
                    f"SET SCHEMA {quote_ident(schema)}"
                )
            await conn.execute(f"DROP SCHEMA {quote_ident(staging)} CASCADE")
        print(
            f"{projection.name}: built up to stream seq {result.applied_upto} "
            f"in {time.monotonic() - started:.1f} s"
        )
    moment = f"stream seq {until_seq}" if until_seq is not None else f"{until_time}"
    print(f"read models as of {moment} are in schema {schema}; query them with:")
    print(f"  SET search_path TO {schema};")


async def projections_status(args: argparse.Namespace) -> int:
    from agency.infra.db import create_pool
    from agency.infra.jetstream.connection import Bus
    from agency.projections.catalog import ALL
    from agency.projections.status import projection_statuses

    endpoints = running_endpoints(args)
    pool = await create_pool(endpoints.database_url)
    try:
        async with Bus(endpoints.nats_url, name="agency-status") as bus, pool.acquire() as conn:
            statuses = await projection_statuses(conn, bus.js, [p.name for p in ALL])
    finally:
        await pool.close()
    print(f"{'projection':<20} {'applied':>10} {'last':>10} {'lag':>8}  status")
    for s in statuses:
        line = f"{s.name:<20} {s.applied_seq:>10} {s.last_seq:>10} {s.lag:>8}  {s.status}"
        print(line + (f" ({s.error})" if s.error else ""))
    return 0
