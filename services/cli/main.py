"""`agency`: bring the system up, look at it, and talk to it.

Parsing the command line loads no command's code: each command module registers its
arguments with the standard library alone and imports what its handler runs inside the
handler, so `agency --help` answers at once and a short command loads only what it uses
(`bench/cli.py`, `tests/cli/test_startup.py`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from agency.services.cli import (
    agencies_cmd,
    archive_cmd,
    contracts_cmd,
    demo_cmd,
    dlq_cmd,
    events_cmd,
    infra_cmd,
    keys_cmd,
    models_cmd,
    projections_cmd,
    providers_cmd,
    replay_cmd,
    serve_cmd,
    tenants_cmd,
    threads_cmd,
    up_cmd,
    version_cmd,
    webhooks_cmd,
)
from agency.services.workflows.cli import commands as workflow_cmd

Handler = Callable[[argparse.Namespace], Coroutine[Any, Any, int]]


# The errors reported in one line, without a traceback, as (module, class). A class whose
# module is not imported yet cannot be what was raised, so none is imported to check.
REPORTED = (
    ("agency.infra.endpoints", "EndpointsNotFound"),
    ("agency.contracts.errors", "ContractError"),
    ("agency.services.agents.blueprint_file", "BlueprintFileError"),
    ("agency.services.agents.checks", "BlueprintInvalid"),
    ("agency.services.agents.system", "SystemLoadError"),
    ("agency.services.workflows.cli.commands", "WorkflowCliError"),
    ("agency.infra.db", "DatabaseRefused"),
    ("agency.services.llm.catalog", "ProvidersFileError"),
    ("agency.services.cli.keys_cmd", "RotationRefused"),
    ("agency.infra.keystore.operator", "KeyUnwrapError"),
)


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
        keys_cmd,
        events_cmd,
        dlq_cmd,
        projections_cmd,
        replay_cmd,
        archive_cmd,
        agencies_cmd,
        contracts_cmd,
        workflow_cmd,
        models_cmd,
        providers_cmd,
        webhooks_cmd,
        version_cmd,
    ):
        module.register(groups)
    return parser


def reported(error: BaseException) -> bool:
    """Whether `error` is one of `REPORTED`."""
    for module_name, class_name in REPORTED:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(error, getattr(module, class_name)):
            return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler

    import uvloop

    from agency.infra.settings import InfraSettings
    from agency.services.observability.logging import configure_logging
    from agency.services.observability.tracing import configure_tracing, shutdown_tracing

    configure_logging(InfraSettings.from_env().log_format)
    tracing = configure_tracing(f"agency-{getattr(args, 'service', None) or args.group}")
    try:
        return uvloop.run(handler(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if not reported(e):
            raise
        print(f"agency: {e}", file=sys.stderr)
        return 2
    finally:
        shutdown_tracing(tracing)


if __name__ == "__main__":
    sys.exit(main())
