"""A small MCP server for the tests: over streamable HTTP in the test process (`http_app`),
or over stdio as a child process (`python tests/mcp/tool_servers.py`, which appends its pid
to `$MCP_PID_FILE` so a test can check the process is stopped)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

Scope = MutableMapping[str, Any]
Asgi = Callable[[Scope, Any, Any], Awaitable[None]]

server = MCPServer("calc", log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    if b == 0:
        raise ToolError("cannot divide by zero")
    return a / b


@server.tool()
async def wait(seconds: float) -> str:
    """Answer after some seconds."""
    await anyio.sleep(seconds)
    return f"waited {seconds} s"


def http_app(seen_headers: list[dict[str, str]]) -> Asgi:
    """The server's streamable HTTP app at `/mcp`, recording each request's headers."""
    inner = server.streamable_http_app()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen_headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await inner(scope, receive, send)

    return app


if __name__ == "__main__":
    pid_file = os.environ.get("MCP_PID_FILE")
    if pid_file:
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    server.run("stdio")
