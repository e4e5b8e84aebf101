"""`/mcp` behind a proxy that rewrites `Host` and serves the API under a path: the 401's
pointer and the protected-resource metadata name the origin the client called, as a
trusted proxy forwarded it, not the API behind the proxy."""

from __future__ import annotations

import httpx2
from mcp.client.auth.utils import extract_resource_metadata_from_www_auth

from tests.forwarding_proxy import proxy
from tests.mcp.conftest import System

PREFIX = "/tools/agency"


async def test_the_metadata_behind_a_proxy_names_the_forwarded_origin(mcp_system: System) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    accept = {"Accept": "application/json, text/event-stream"}
    async with (
        proxy(mcp_system.url, prefix=PREFIX) as front,
        httpx2.AsyncClient(base_url=f"{front.url}{PREFIX}", timeout=10) as http,
    ):
        # The proxy says `X-Forwarded-Proto: https` and the `Host` it was called by.
        public = f"https://{front.url.removeprefix('http://')}{PREFIX}"
        refused = await http.post("/mcp", json=body, headers=accept)
        assert refused.status_code == 401
        where = extract_resource_metadata_from_www_auth(refused)
        assert where == f"{public}/.well-known/oauth-protected-resource/mcp"
        document = await http.get("/.well-known/oauth-protected-resource/mcp")
        assert document.status_code == 200
        assert document.json()["resource"] == f"{public}/mcp"
        assert front.requests[0].startswith(b"POST /mcp "), front.requests
