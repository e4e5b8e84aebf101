"""`agency serve NAME`: run one service in the foreground against a running system.

Several copies of a service may run at once (against one NATS): they share its durable
consumers, so each command and event is handled by one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from infra.db import create_pool, migrate
from infra.jetstream.connection import Bus
from projections.setup import prepare_read_models
from services.agents.system import AgentSystem
from services.api.deps import ApiDeps, ApiSettings
from services.api.server import run_api
from services.cli.common import add_app, add_data_dir, agent_system, running_endpoints
from services.cli.signals import stop_on_signals
from services.llm.provider import Provider, provider_from_env
from services.stack import StackConfig, service_runners

SERVICES = ("registry", "runtime", "tools", "subagents", "projector", "api")


def register(groups: Any) -> None:
    serve = groups.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=SERVICES, help="which service")
    add_data_dir(serve)
    add_app(serve)
    serve.add_argument(
        "--ack-wait",
        type=float,
        default=30.0,
        help="seconds before work a killed worker held is redelivered to another",
    )
    serve.add_argument("--host", default="127.0.0.1", help="api: host to listen on")
    serve.add_argument("--port", type=int, default=0, help="api: port (default: a free one)")
    serve.set_defaults(handler=serve_service)


class _NoModel:
    """For services that never call a model: only the runtime needs a provider."""

    async def complete(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this service does not call models")


async def serve_service(args: argparse.Namespace) -> int:
    endpoints = running_endpoints(args)
    stop = stop_on_signals()
    system = agent_system(args)
    if args.service == "api":
        secret = os.environ.get("AGENCY_ADMIN_SECRET") or endpoints.admin_secret
        await _serve_api(endpoints.nats_url, endpoints.database_url, system, secret, args, stop)
        return 0
    provider: Provider = _NoModel()
    if args.service == "runtime":
        fake_url = endpoints.extra.get("fake_llm_url") if endpoints.extra else None
        provider = provider_from_env(fake_url if isinstance(fake_url, str) else None)
    config = StackConfig(
        nats_url=endpoints.nats_url,
        database_url=endpoints.database_url,
        system=system,
        provider=provider,
        runtime_ack_wait=args.ack_wait,
        tools_ack_wait=args.ack_wait,
    )
    await service_runners(config)[args.service](stop)
    return 0


async def _serve_api(
    nats_url: str,
    database_url: str,
    system: AgentSystem,
    admin_secret: str | None,
    args: argparse.Namespace,
    stop: asyncio.Event,
) -> None:
    pool = await create_pool(database_url)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        await prepare_read_models(pool)
        async with Bus(nats_url, name="agency-api") as bus:
            deps = ApiDeps(
                pool=pool, bus=bus, system=system, settings=ApiSettings(admin_secret=admin_secret)
            )
            await run_api(
                deps, args.host, args.port, stop, ready=lambda url: print(f"api: {url}", flush=True)
            )
    finally:
        await asyncio.wait_for(pool.close(), timeout=10)
