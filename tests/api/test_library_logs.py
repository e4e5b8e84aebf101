"""The API's process logs through structlog alone: starting the API app does not turn the
standard library's root logger up to INFO, so the libraries a run uses in that process
(the model's HTTP client, the MCP server) do not print a line per request."""

from __future__ import annotations

import logging

import httpx


async def test_starting_the_api_leaves_the_libraries_info_lines_off(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/healthz")).status_code == 200  # the app has started
    for name in ("httpx2", "mcp.server.streamable_http_manager", "litestar"):
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
