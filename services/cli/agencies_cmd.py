"""`agency agencies delete A`: an agency deleted with every thread of it, over the HTTP API
(`DELETE /agencies/{agencyId}`, docs/data.md)."""

from __future__ import annotations

import argparse
from typing import Any

from agency.services.cli.arguments import add_data_dir, command_group


def register(groups: Any) -> None:
    agencies = command_group(groups, "agencies", "the tenant's agencies")
    delete = agencies.add_parser(
        "delete",
        help="erase every thread of the agency, then the agency (docs/data.md)",
    )
    delete.add_argument("id", help="the agency's id")
    delete.add_argument("--json", action="store_true", help="print the answer as JSON")
    add_data_dir(delete)
    delete.set_defaults(handler=agencies_delete)


async def agencies_delete(args: argparse.Namespace) -> int:
    from agency.services.cli.threads_client_cmd import agencies_delete as delete

    return await delete(args)
