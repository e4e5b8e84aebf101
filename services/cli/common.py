"""Arguments and look-ups shared by commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.endpoints import Endpoints, read_endpoints, resolve_data_dir


def add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=None,
        help="where the running system keeps its data and endpoints.json "
        "(default: $AGENCY_DATA_DIR or ./.agency)",
    )


def data_dir(args: argparse.Namespace) -> Path:
    return resolve_data_dir(args.data_dir)


def running_endpoints(args: argparse.Namespace) -> Endpoints:
    return read_endpoints(data_dir(args))


def add_app(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        default=None,
        help="the agent system to load, as package.module:attribute "
        "(default: services.agents.default:system)",
    )
