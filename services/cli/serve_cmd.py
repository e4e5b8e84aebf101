"""`agency serve NAME`: run one service in the foreground against a running system."""

from __future__ import annotations

import argparse
from typing import Any

from services.cli.common import add_data_dir, running_endpoints
from services.cli.signals import stop_on_signals
from services.projector.service import run_projector

SERVICES = {"projector": run_projector}


def register(groups: Any) -> None:
    serve = groups.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=sorted(SERVICES), help="which service")
    add_data_dir(serve)
    serve.set_defaults(handler=serve_service)


async def serve_service(args: argparse.Namespace) -> int:
    endpoints = running_endpoints(args)
    stop = stop_on_signals()
    await SERVICES[args.service](endpoints.nats_url, endpoints.database_url, stop)
    return 0
