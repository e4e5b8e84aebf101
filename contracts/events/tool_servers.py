"""The MCP servers and remote A2A agents a blueprint gives its agent as tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from agency.contracts.events.blueprint_fields import (
    Checked,
    Config,
    HeaderValue,
    HttpUrl,
    McpServerName,
    Seconds,
)

# One object, shared by every shape of a server: msgspec leaves a float default out of an
# encoding only when it is this very object.
DEFAULT_MCP_TIMEOUT = 30.0


class McpServer(Config, frozen=True, kw_only=True):
    """An MCP server whose tools the agent gets, each named `<name>__<tool>`.

    Exactly one transport: `url`, a streamable HTTP endpoint sent `headers`, or `command`,
    the argv of a stdio server started with `env` added to its environment. A header or env
    value may be a reference `${ENV:NAME}`, read from the environment of the service that
    connects, so the secret is never written to the log. References and `command` are the
    operator's: they are refused in blueprints saved over HTTP or NATS (`docs/mcp.md`).
    `tools` keeps only those tools of the server (all when empty); `timeout` bounds one call.
    """

    name: McpServerName
    url: HttpUrl = ""
    headers: dict[str, HeaderValue] = {}
    command: Annotated[tuple[str, ...], Checked(operator=True)] = ()
    env: Annotated[dict[str, str], Checked(operator=True)] = {}
    tools: tuple[str, ...] = ()
    timeout: Seconds = DEFAULT_MCP_TIMEOUT

    # The rules `__post_init__` checks, in JSON Schema (for documents that describe servers).
    __json_schema_extra__: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {
                "required": ["url"],
                "properties": {
                    "url": {"pattern": "^https?://"},
                    "command": {"maxItems": 0},
                    "env": {"maxProperties": 0},
                },
            },
            {
                "required": ["command"],
                "properties": {
                    "command": {"minItems": 1},
                    "url": {"maxLength": 0},
                    "headers": {"maxProperties": 0},
                },
            },
        ]
    }

    def __post_init__(self) -> None:
        if bool(self.url) == bool(self.command):
            raise ValueError(
                f"MCP server {self.name!r} needs exactly one of `url` (streamable HTTP) "
                "or `command` (stdio)"
            )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: url {self.url[:200]!r} is not http(s)")
        if self.url and self.env:
            raise ValueError(f"MCP server {self.name!r}: `env` applies to stdio servers only")
        if self.command and self.headers:
            raise ValueError(f"MCP server {self.name!r}: `headers` apply to HTTP servers only")

    def operator_only(self) -> str | None:
        """Why a tenant may not name this server in a blueprint of its own, or None."""
        if self.command:
            return f"MCP server {self.name!r}: stdio servers (`command`) are the operator's"
        return _environment_header(f"MCP server {self.name!r}", self.headers, "servers")


DEFAULT_REMOTE_AGENT_TIMEOUT = 120.0


class RemoteAgent(Config, frozen=True, kw_only=True):
    """A remote A2A agent the agent gets as a tool named `name`: a subagent that lives
    elsewhere (`docs/protocols.md`, "Remote A2A agents as tools").

    `url` is the agent's card (e.g. `https://host/.well-known/agent-card.json`), fetched at
    the start of a run; the tool's description is `description`, or else the card's, with
    its skills. `headers` are sent with every request, the card's included (a key: e.g.
    `Authorization`); a value may be a reference `${ENV:NAME}`, which only the operator's
    blueprints may hold, as for MCP servers. `timeout` bounds one call: the message sent and
    the remote task reaching a final state or asking for input.
    """

    name: McpServerName
    url: HttpUrl
    description: str = ""
    headers: dict[str, HeaderValue] = {}
    timeout: Seconds = DEFAULT_REMOTE_AGENT_TIMEOUT

    def operator_only(self) -> str | None:
        """Why a tenant may not name this agent in a blueprint of its own, or None."""
        return _environment_header(f"remote agent {self.name!r}", self.headers, "agents")


def _environment_header(owner: str, headers: Mapping[str, str], whose: str) -> str | None:
    """Why `headers` are only the operator's to give (one references the environment,
    which only the operator's `whose` may), or None."""
    for key, value in headers.items():
        if "${ENV:" in value:
            return (
                f"{owner}: header {key!r} references the environment "
                f"(`${{ENV:NAME}}`), which only the operator's {whose} may"
            )
    return None
