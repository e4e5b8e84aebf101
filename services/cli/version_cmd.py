"""`agency version`: the package's version and the contracts it speaks (`CHANGELOG.md`)."""

from __future__ import annotations

import argparse
import platform
from importlib.resources import files
from typing import Any


def register(groups: Any) -> None:
    version = groups.add_parser(
        "version", help="the version of agency and of its wire and storage contracts"
    )
    version.set_defaults(handler=show_version)


def version_lines() -> list[str]:
    """What `agency version` prints: the package, the events (those past schema version 1
    named), the commands, and the newest PostgreSQL migration it applies."""
    from agency.contracts.codec import COMMAND_TYPES, EVENT_TYPES
    from agency.contracts.version import package_version

    evolved = sorted(
        f"{name} v{cls.schema_version}"
        for name, cls in EVENT_TYPES.items()
        if cls.schema_version > 1
    )
    migrations = sorted(
        p.name for p in files("agency.infra").joinpath("migrations").iterdir()
        if p.name.endswith(".sql")
    )  # fmt: skip
    return [
        f"agency {package_version()} (Python {platform.python_version()})",
        f"events: {len(EVENT_TYPES)} types, version 1 but {', '.join(evolved) or 'none'}",
        f"commands: {len(COMMAND_TYPES)} types",
        f"migrations: {len(migrations)}, the newest {migrations[-1] if migrations else 'none'}",
    ]


async def show_version(args: argparse.Namespace) -> int:
    print("\n".join(version_lines()))
    return 0
