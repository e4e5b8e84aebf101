"""`agency infra up|status`, `agency migrate`."""

from __future__ import annotations

import argparse
import os
from typing import Any

from agency.services.cli.arguments import (
    add_data_dir,
    command_group,
    data_dir,
    print_urls,
    running_endpoints,
)


def register(groups: Any) -> None:
    sub = command_group(groups, "infra", "embedded NATS and PostgreSQL")
    up = sub.add_parser(
        "up",
        help="start NATS and PostgreSQL in the data directory and stay in the foreground",
    )
    add_data_dir(up)
    up.set_defaults(handler=infra_up)
    status = sub.add_parser("status", help="say whether the system in the data directory runs")
    add_data_dir(status)
    status.set_defaults(handler=infra_status)
    migrate = groups.add_parser(
        "migrate",
        help="upgrade the data directory's store to this release (the events stream's subject "
        "layout, the database) and exit; the system must be stopped",
    )
    add_data_dir(migrate)
    migrate.set_defaults(handler=migrate_store)


async def infra_up(args: argparse.Namespace) -> int:
    from agency.infra.endpoints import Endpoints, remove_endpoints, write_endpoints
    from agency.infra.settings import InfraSettings
    from agency.infra.system import Infrastructure
    from agency.services.cli.signals import stop_on_signals

    directory = data_dir(args)
    stop = stop_on_signals()
    async with Infrastructure(directory, InfraSettings.from_env()) as urls:
        endpoints = Endpoints(
            pid=os.getpid(),
            nats_url=urls.nats_url,
            database_url=urls.database_url,
            nats_auth_dir=str(urls.nats_auth.directory) if urls.nats_auth else None,
        )
        path = write_endpoints(directory, endpoints)
        try:
            print_urls(urls.nats_url, urls.database_url)
            print(f"endpoints: {path}", flush=True)
            print("ready; Ctrl-C to stop", flush=True)
            await stop.wait()
        finally:
            remove_endpoints(directory, endpoints.pid)
    print("stopped", flush=True)
    return 0


async def migrate_store(args: argparse.Namespace) -> int:
    """Start the data directory's NATS and PostgreSQL, which upgrades what they hold
    (`infra/jetstream/upgrade.py`, the database migrations), then stop them."""
    from agency.infra.endpoints import EndpointsNotFound
    from agency.infra.settings import InfraSettings
    from agency.infra.system import Infrastructure

    try:
        endpoints = running_endpoints(args)
    except EndpointsNotFound:
        pass
    else:
        if _pid_alive(endpoints.pid):
            print(f"the system runs (pid {endpoints.pid}): stop it before migrating")
            return 1
    async with Infrastructure(data_dir(args), InfraSettings.from_env()):
        pass
    print("the store is at this release's layout", flush=True)
    return 0


async def infra_status(args: argparse.Namespace) -> int:
    from agency.infra.endpoints import EndpointsNotFound
    from agency.infra.nats_auth import without_credentials

    try:
        endpoints = running_endpoints(args)
    except EndpointsNotFound as e:
        print(f"not running: {e}")
        return 1
    nats_ok = await _nats_answers(endpoints.nats_url)
    pg_ok = await _postgres_answers(endpoints.database_url)
    alive = _pid_alive(endpoints.pid)
    print(f"pid {endpoints.pid}: {'running' if alive else 'gone (stale endpoints.json)'}")
    shown = without_credentials(endpoints.nats_url)
    print(f"nats:     {shown} {'ok' if nats_ok else 'unreachable'}")
    shown = without_credentials(endpoints.database_url)
    print(f"postgres: {shown} {'ok' if pg_ok else 'unreachable'}")
    if endpoints.api_url:
        print(f"api:      {endpoints.api_url}")
    return 0 if (alive and nats_ok and pg_ok) else 1


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _nats_answers(url: str) -> bool:
    import nats

    from agency.infra.jetstream.natsclient import connect as nats_connect

    try:
        nc = await nats_connect(
            url, connect_timeout=2, max_reconnect_attempts=0, allow_reconnect=False
        )
    except (OSError, nats.errors.Error, TimeoutError):
        return False
    try:
        await nc.jetstream().account_info()
        return True
    except (nats.errors.Error, TimeoutError):
        return False
    finally:
        await nc.close()


async def _postgres_answers(url: str) -> bool:
    import asyncpg

    try:
        conn = await asyncpg.connect(url, timeout=3)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    try:
        return bool(await conn.fetchval("SELECT 1") == 1)
    finally:
        await conn.close(timeout=3)
