"""Shared pieces of the benchmarks: embedded servers, timing and the `bench:` line."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from agency.infra.launch import NatsServer, PostgresServer
from agency.services.observability.logging import configure_logging


@dataclass(frozen=True, slots=True)
class Servers:
    nats_url: str
    database_url: str
    sync_interval: str


@asynccontextmanager
async def embedded_servers() -> AsyncIterator[Servers]:
    """NATS and PostgreSQL in a temporary directory, with the project's durable defaults.

    `AGENCY_NATS_SYNC` overrides the fsync interval, as it does for `agency up`.
    """
    configure_logging("json", level=40)
    sync = os.environ.get("AGENCY_NATS_SYNC", "always")
    with tempfile.TemporaryDirectory(prefix="agency-bench-") as tmp:
        root = Path(tmp)
        async with (
            NatsServer(root / "nats", sync_interval=sync) as nats,
            PostgresServer(root / "pg") as pg,
        ):
            yield Servers(nats.url, pg.url, sync)


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def report(metric: str, ours: float, baseline: float, unit: str = "/s") -> None:
    ratio = ours / baseline if baseline else 0.0
    print(f"  {metric}: ours {ours:,.0f}{unit}, baseline {baseline:,.0f}{unit}", flush=True)
    print(f"bench: {metric} ours={ours:.1f} baseline={baseline:.1f} ratio={ratio:.3f}", flush=True)


def print_load(moment: str) -> None:
    """The machine's load average at `moment`: what else ran beside the benchmark."""
    one, five, fifteen = os.getloadavg()
    print(f"  load average {moment}: {one:.2f} {five:.2f} {fifteen:.2f} "
          f"({os.cpu_count()} cores)", flush=True)  # fmt: skip


def first_error(error: BaseException) -> BaseException:
    """The first error inside `error`, through nested exception groups (what a run of the
    benchmark failed with first)."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
