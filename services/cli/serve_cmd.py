"""`agency serve NAME`: run one service in the foreground against a running system."""

from __future__ import annotations

import argparse
from typing import Any

from services.agents.system import load_system
from services.cli.common import add_app, add_data_dir, running_endpoints
from services.cli.signals import stop_on_signals
from services.llm.provider import provider_from_env
from services.stack import StackConfig, service_runners

SERVICES = ("registry", "runtime", "tools", "subagents", "projector")


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
    serve.set_defaults(handler=serve_service)


async def serve_service(args: argparse.Namespace) -> int:
    endpoints = running_endpoints(args)
    stop = stop_on_signals()
    system = load_system(args.app)
    fake_url = endpoints.extra.get("fake_llm_url") if endpoints.extra else None
    config = StackConfig(
        nats_url=endpoints.nats_url,
        database_url=endpoints.database_url,
        system=system,
        provider=provider_from_env(fake_url if isinstance(fake_url, str) else None),
        runtime_ack_wait=args.ack_wait,
        tools_ack_wait=args.ack_wait,
    )
    await service_runners(config)[args.service](stop)
    return 0
