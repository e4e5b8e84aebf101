"""`agency`: bring the system up, look at it, and talk to it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import uvloop

from agency.contracts.errors import ContractError
from agency.infra.db import DatabaseRefused
from agency.infra.endpoints import EndpointsNotFound
from agency.infra.gc_tuning import tune_gc
from agency.infra.settings import InfraSettings
from agency.services.agents.blueprint_file import BlueprintFileError
from agency.services.agents.checks import BlueprintInvalid
from agency.services.agents.system import SystemLoadError
from agency.services.cli import (
    contracts_cmd,
    demo_cmd,
    dlq_cmd,
    events_cmd,
    infra_cmd,
    models_cmd,
    projections_cmd,
    providers_cmd,
    replay_cmd,
    serve_cmd,
    tenants_cmd,
    threads_cmd,
    up_cmd,
    workflow_cmd,
)
from agency.services.cli.workflow_cmd import WorkflowCliError
from agency.services.llm.catalog import ProvidersFileError
from agency.services.observability.logging import configure_logging
from agency.services.observability.tracing import configure_tracing, shutdown_tracing

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


class CliError(Exception):
    """A failure to report in one line, without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agency", description="Run LLM agents on an event-sourced backend."
    )
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for module in (
        up_cmd,
        demo_cmd,
        infra_cmd,
        serve_cmd,
        threads_cmd,
        tenants_cmd,
        events_cmd,
        dlq_cmd,
        projections_cmd,
        replay_cmd,
        contracts_cmd,
        workflow_cmd,
        models_cmd,
        providers_cmd,
    ):
        module.register(groups)
    return parser


# The commands that run the system (the others exit within seconds).
LONG_RUNNING = frozenset({"up", "serve"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.group in LONG_RUNNING:
        tune_gc()
    configure_logging(InfraSettings.from_env().log_format)
    tracing = configure_tracing(f"agency-{getattr(args, 'service', None) or args.group}")
    handler: Handler = args.handler
    try:
        return uvloop.run(handler(args))
    except KeyboardInterrupt:
        return 130
    except (
        EndpointsNotFound,
        ContractError,
        CliError,
        BlueprintFileError,
        BlueprintInvalid,
        SystemLoadError,
        WorkflowCliError,
        DatabaseRefused,
        ProvidersFileError,
    ) as e:
        print(f"agency: {e}", file=sys.stderr)
        return 2
    finally:
        shutdown_tracing(tracing)


if __name__ == "__main__":
    sys.exit(main())
