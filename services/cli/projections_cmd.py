"""`agency projections rebuild|status`."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from infra.db import create_pool
from infra.jetstream.connection import Bus
from projections.catalog import ALL, by_name
from projections.errors import ProjectionError
from projections.rebuild import rebuild
from projections.status import projection_statuses
from services.cli.common import add_data_dir, running_endpoints


def register(groups: Any) -> None:
    group = groups.add_parser("projections", help="read models built from the log")
    sub = group.add_subparsers(dest="command", required=True, metavar="COMMAND")
    rb = sub.add_parser("rebuild", help="drop and rebuild read models from sequence 1")
    rb.add_argument("name", nargs="?", default=None, help="one projection (default: all)")
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
    try:
        chosen = [by_name(args.name)] if args.name else list(ALL)
    except ProjectionError as e:
        print(f"agency: {e}", file=sys.stderr)
        return 2
    endpoints = running_endpoints(args)
    pool = await create_pool(endpoints.database_url)
    try:
        async with Bus(endpoints.nats_url, name="agency-rebuild") as bus:
            for projection in chosen:
                started = time.monotonic()
                result = await rebuild(
                    pool, bus.js, projection, progress=ProgressBar(projection.name)
                )
                print(
                    f"{projection.name}: rebuilt up to stream seq {result.applied_upto} "
                    f"in {time.monotonic() - started:.1f} s"
                )
    finally:
        await pool.close()
    return 0


async def projections_status(args: argparse.Namespace) -> int:
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
