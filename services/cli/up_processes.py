"""`agency up`'s services as worker processes: each runs as `agency serve NAME`, a child that
never outlives `agency up` (PR_SET_PDEATHSIG, `infra/launch/process.py`).

A child is what the supervisor (`services/supervisor.py`) runs in place of the service: one
that exits before it is told to stop is restarted with the same backoff, and `/readyz` shows
its state. The child is given what it needs through `AGENCY_SERVE_ENDPOINTS` (its own NATS
user's URL, the database, the fake model's URL) and the same `--app`, `--blueprints` and
data directory; its logs go to `agency up`'s stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agency.infra.roles import SERVICE_ROLES

if TYPE_CHECKING:
    import asyncio

    from agency.infra.endpoints import Endpoints
    from agency.infra.launch.process import ChildProcess
    from agency.services.supervisor import ServiceRunner

# The endpoints an `agency serve` child of `agency up` uses instead of `endpoints.json`.
ENDPOINTS_ENV = "AGENCY_SERVE_ENDPOINTS"
PROCESSES_ENV = "AGENCY_PROCESSES"
# `auto` (the default): `services` on a machine giving this process at least
# `SERVICES_FROM_CORES` cores, `single` below; `services`: each service in a process of its
# own; `single`: all in one; or the services (comma-separated) that get a process of their
# own, the rest in this one. On 2 cores the worker processes made nothing faster (the
# system's CPU, NATS and PostgreSQL included, is what bounds it there) and cost about
# 630 MB: docs/performance.md, "Worker processes".
LAYOUTS = ("auto", "services", "single")
SERVICES_FROM_CORES = 4
# What `agency up` may run in a worker process (the API stays in `agency up`'s).
CHILD_SERVICES = tuple(role for role in SERVICE_ROLES if role != "api")
# How long a child may take to stop on SIGTERM before it is killed.
STOP_TIMEOUT = 10.0


class ChildExited(Exception):
    """A service's process ended before it was told to stop."""


def add_processes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--processes",
        type=_layout,
        default=os.environ.get(PROCESSES_ENV, "auto"),
        help="auto (default, or $AGENCY_PROCESSES): services with 4 cores or more, single "
        "with fewer; services: each service in a worker process of its own, the API in this "
        "one; single (or 1): every service in this process; or the services to run in "
        "processes of their own, comma-separated (runtime,tools)",
    )


def _layout(value: str) -> str:
    # argparse applies this to the default too, so a wrong $AGENCY_PROCESSES is refused.
    layout = "single" if value == "1" else value
    if layout in LAYOUTS:
        return layout
    unknown = [name for name in layout.split(",") if name not in CHILD_SERVICES]
    if unknown or not layout:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected one of auto, services, single, 1, or services among "
            f"{', '.join(CHILD_SERVICES)} (comma-separated)"
        )
    return layout


def in_processes(layout: str, cores: int | None = None) -> tuple[str, ...]:
    """The services `layout` runs in worker processes of their own (`auto` by `cores`,
    by default those this process may run on)."""
    if layout == "auto":
        layout = "services" if (cores or usable_cores()) >= SERVICES_FROM_CORES else "single"
    if layout == "single":
        return ()
    if layout == "services":
        return CHILD_SERVICES
    return tuple(name for name in CHILD_SERVICES if name in layout.split(","))


def usable_cores() -> int:
    """The cores this process may run on (its affinity, which a container may narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def endpoints_from_env() -> Endpoints | None:
    """What `agency up` gave this `agency serve` child; None when run on its own."""
    import msgspec

    from agency.infra.endpoints import Endpoints

    given = os.environ.get(ENDPOINTS_ENV)
    return msgspec.json.decode(given, type=Endpoints) if given else None


def service_processes(
    services: tuple[str, ...],
    *,
    directory: Path,
    database_url: str,
    nats_urls: Mapping[str, str],
    fake_model_url: str | None,
    args: argparse.Namespace,
) -> dict[str, ServiceRunner]:
    """A runner per service, each starting `agency serve NAME` and waiting on it."""
    import msgspec

    from agency.infra.endpoints import Endpoints
    from agency.infra.launch.process import ChildProcess

    options = ["--data-dir", str(directory)]
    if args.app:
        options += ["--app", args.app]
    if args.blueprints:
        options += ["--blueprints", args.blueprints]
    runners: dict[str, ServiceRunner] = {}
    for name in services:
        endpoints = Endpoints(
            pid=os.getpid(),
            # Its own NATS user only: a child never holds another service's credentials.
            nats_url=nats_urls[name],
            database_url=database_url,
            extra={"fake_llm_url": fake_model_url} if fake_model_url else {},
        )
        env = {**os.environ, ENDPOINTS_ENV: msgspec.json.encode(endpoints).decode()}
        argv = [sys.executable, "-m", "agency.services.cli.main", "serve", name, *options]
        runners[name] = _runner(ChildProcess(f"agency-{name}", argv, log_path=None, env=env))
    return runners


def _runner(child: ChildProcess) -> ServiceRunner:
    import asyncio

    async def run(stop: asyncio.Event) -> None:
        await child.start()
        try:
            exited = asyncio.ensure_future(child.exited())
            stopping = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait((exited, stopping), return_when=asyncio.FIRST_COMPLETED)
            finally:
                exited.cancel()
                stopping.cancel()
            if not stop.is_set():
                raise ChildExited(f"pid {child.pid} exited with {child.returncode}")
        finally:
            # Told to stop, cancelled, or gone: no child is left behind either way.
            await child.stop(STOP_TIMEOUT)

    return run
