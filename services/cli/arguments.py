"""Arguments and look-ups shared by commands. It imports no more than the standard library
when loaded: every command module uses it to register its arguments (`main.py`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

    from agency.infra.endpoints import Endpoints
    from agency.services.agents.system import AgentSystem


def command_group(groups: Any, name: str, help: str) -> Any:
    """A command group (`agency NAME COMMAND ...`): the subparsers of its commands."""
    group = groups.add_parser(name, help=help)
    return group.add_subparsers(dest="command", required=True, metavar="COMMAND")


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=None,
        help="where the running system keeps its data and endpoints.json "
        "(default: $AGENCY_DATA_DIR or ./.agency)",
    )


def data_dir(args: argparse.Namespace) -> Path:
    from agency.infra.endpoints import resolve_data_dir

    return resolve_data_dir(args.data_dir)


def running_endpoints(args: argparse.Namespace) -> Endpoints:
    """The running system's endpoints; its operator key too, so that a command reading or
    writing its threads opens and seals them as its services do (docs/data.md)."""
    from agency.infra.endpoints import read_endpoints
    from agency.infra.keystore.operator import use_existing_operator_key

    directory = data_dir(args)
    use_existing_operator_key(directory)
    return read_endpoints(directory)


def add_app(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        default=None,
        help="the agent system to load: package.module:attribute (looked for in the "
        "current directory first) or path/to/file.py:attribute "
        "(default: services.agents.default:system)",
    )
    parser.add_argument(
        "--blueprints",
        default=os.environ.get("AGENCY_BLUEPRINTS"),
        help="a JSON file of static blueprints to add (default: $AGENCY_BLUEPRINTS)",
    )


def agent_system(args: argparse.Namespace) -> AgentSystem:
    """The `--app` system, with the `--blueprints` file's blueprints added; a blueprint
    naming a tag, hook or tool the system does not have is a `BlueprintInvalid`."""
    from agency.services.agents.blueprint_file import load_blueprint_file
    from agency.services.agents.system import load_system

    system = load_system(args.app)
    if args.blueprints:
        for blueprint in load_blueprint_file(Path(args.blueprints)):
            system.add_agent(blueprint)
        system.check()
    return system


def add_replay_options(parser: argparse.ArgumentParser, deltas: str, re_execute: str) -> None:
    """`--deltas`, `--json` and `--re-execute` of a replay, with what each shows or does."""
    parser.add_argument("--deltas", action="store_true", help=deltas)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--re-execute", action="store_true", help=re_execute)


def error_message(response: httpx.Response) -> str:
    """What an API error answer says: its `error`, or else its body."""
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text


def print_urls(nats_url: str, database_url: str) -> None:
    """The running system's NATS and PostgreSQL, as `up` and `infra up` show them."""
    from agency.infra.nats_auth import without_credentials

    print(f"nats:     {without_credentials(nats_url)}", flush=True)
    print(f"postgres: {without_credentials(database_url)}", flush=True)
