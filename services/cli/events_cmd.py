"""`agency events tail`: a tenant's events as they arrive."""

from __future__ import annotations

import argparse
import sys
from contextlib import AsyncExitStack
from typing import Any

from agency.services.cli.arguments import add_data_dir, command_group, running_endpoints


def register(groups: Any) -> None:
    sub = command_group(groups, "events", "read the event log")
    tail = sub.add_parser("tail", help="print a tenant's events as they arrive")
    tail.add_argument("--tenant", required=True, help="tenant id")
    tail.add_argument(
        "--from-seq",
        type=int,
        default=None,
        help="start at this stream sequence (default: only events from now on)",
    )
    tail.add_argument(
        "--limit", type=int, default=None, help="stop after printing this many events"
    )
    add_data_dir(tail)
    tail.set_defaults(handler=events_tail)


async def events_tail(args: argparse.Namespace) -> int:
    from agency.contracts.ids import validate_token
    from agency.contracts.subjects import tenant_events_filter
    from agency.domain.event_text import format_line
    from agency.infra.jetstream.connection import Bus
    from agency.infra.jetstream.reader import OrderedReader
    from agency.infra.jetstream.records import RecordedEvent
    from agency.projections.rebuild import last_stream_seq
    from agency.services.cli.signals import stop_on_signals

    tenant = validate_token("tenant id", args.tenant)
    endpoints = running_endpoints(args)
    stop = stop_on_signals()
    printed = 0
    async with Bus(endpoints.nats_url, name="agency-events-tail") as bus, AsyncExitStack() as on:
        layout = bus.layout
        if args.from_seq is not None and layout.partitioned:
            print(
                f"agency: --from-seq names one stream's sequence; the events log has "
                f"{layout.partitions} partitions (docs/scaling.md)",
                file=sys.stderr,
            )
            return 2
        readers = []
        for partition in range(layout.partitions):
            stream = layout.stream(partition)
            start = (
                args.from_seq
                if args.from_seq is not None
                else await last_stream_seq(bus.js, stream) + 1
            )
            subjects = (
                layout.tenant_filter(tenant, partition)
                if layout.partitioned
                else tenant_events_filter(tenant)
            )
            reader = OrderedReader(bus.js, subjects, start_seq=start, stream=stream)
            readers.append(await on.enter_async_context(reader))
        while not stop.is_set():
            for reader in readers:
                for item in await reader.next_batch(timeout=0.5 / len(readers)):
                    if isinstance(item, RecordedEvent):
                        print(format_line(item), flush=True)
                    else:
                        print(f"{item.stream_seq:>8} undecodable on {item.subject}: {item.reason}")
                    printed += 1
                    if args.limit is not None and printed >= args.limit:
                        return 0
    return 0
