"""The version of the installed package: what the API, the MCP server and the published
schemas say they are (`CHANGELOG.md` says what changed in each)."""

from __future__ import annotations

import importlib.metadata
from functools import cache

# A checkout that was never installed has no metadata to read.
UNKNOWN = "0+unknown"


@cache
def package_version() -> str:
    try:
        return importlib.metadata.version("agency")
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN
