"""`agency contracts schema`: the wire contracts as JSON Schema and AsyncAPI files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agency.services.cli.arguments import command_group


def register(groups: Any) -> None:
    sub = command_group(groups, "contracts", "wire contracts")
    schema = sub.add_parser(
        "schema",
        help="write the JSON Schema of every event and command and an AsyncAPI document",
    )
    schema.add_argument(
        "--out", type=Path, default=Path("schema"), help="directory to write to (default: ./schema)"
    )
    schema.set_defaults(handler=contracts_schema)


async def contracts_schema(args: argparse.Namespace) -> int:
    from agency.contracts.schema import write_schemas

    out: Path = args.out
    try:
        written = write_schemas(out)
    except OSError as e:
        print(f"agency: cannot write schemas to {out}: {e}", file=sys.stderr)
        return 2
    events = sum(1 for p in written if p.parent.name == "events")
    commands = sum(1 for p in written if p.parent.name == "commands")
    print(
        f"wrote {len(written)} files to {out}: {events} event schemas, "
        f"{commands} command schemas and asyncapi.json"
    )
    return 0
