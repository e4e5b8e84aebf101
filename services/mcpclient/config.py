"""An MCP server's configuration as a connection needs it: references resolved, names mapped.

Header values (HTTP) and env values (stdio) may be `${ENV:NAME}`, or contain it: the value of
`NAME` in the environment of the process that connects. The log keeps the reference, never
the secret. A reference to an unset variable is an error naming the server, the key and the
variable, so a missing secret reads as what it is rather than as a 401 from the server.

Tools reach the model as `<server>__<tool>`; characters a model's function name may not hold
(anything but letters, digits, `_` and `-`) become `_`, and the name is cut to 64 characters.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from agency.contracts.events import McpServer
from agency.services.env_references import UnsetReference, resolved

SEPARATOR = "__"
_MAX_TOOL_NAME = 64
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")


class McpConfigError(Exception):
    """The server's configuration cannot be used as it is (e.g. a secret is not set)."""

    def __init__(self, server: str, problem: str) -> None:
        self.server = server
        super().__init__(f"MCP server {server!r}: {problem}")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One server with its references resolved: what a connection is opened with."""

    name: str
    url: str
    headers: tuple[tuple[str, str], ...] = field(repr=False)  # may hold secrets
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = field(repr=False)

    def describe(self) -> str:
        """The server as a person recognises it, without any header or env value."""
        return f"{self.name!r} at {self.url}" if self.url else f"{self.name!r} ({self.command[0]})"


def resolve(server: McpServer, environ: Mapping[str, str] | None = None) -> Endpoint:
    environ = os.environ if environ is None else environ
    return Endpoint(
        name=server.name,
        url=server.url,
        headers=_resolved(server, "header", server.headers, environ),
        command=server.command,
        env=_resolved(server, "env", server.env, environ),
    )


def exposed_name(server: str, tool: str) -> str:
    """The name the model calls an MCP tool by."""
    return _NOT_IN_NAME.sub("_", f"{server}{SEPARATOR}{tool}")[:_MAX_TOOL_NAME]


def _resolved(
    server: McpServer, what: str, values: Mapping[str, str], environ: Mapping[str, str]
) -> tuple[tuple[str, str], ...]:
    try:
        return tuple(sorted(resolved(values, what, environ).items()))
    except UnsetReference as e:
        raise McpConfigError(server.name, str(e)) from e
