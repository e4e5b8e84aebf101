"""Agency served under a path of a reverse proxy the operator trusts
(`AGENCY_TRUSTED_PROXIES`): the SDK's streams, their reconnects after a cut, the console
and `/schema` all work under the proxy's prefix; a peer that is not trusted cannot claim
an address, a scheme, a host or a prefix."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.schema import StreamPart

from agency.services.api.forwarded import (
    ForwardedMiddleware,
    TrustedProxies,
    TrustedProxiesError,
    forwarded_prefix,
)
from agency.services.llm.fake_scripts import ScriptStep
from tests.forwarding_proxy import proxy
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import WAIT, ask, collect

PREFIX = "/tools/agency"
TEXT = "an answer streamed in many small chunks, long enough to be cut in its middle"


async def test_the_sdk_streams_and_resumes_under_a_proxy_prefix(lg: LangGraph) -> None:
    key = "lg-prefix-" + lg.agency
    lg.llm.script(key, [ScriptStep(content=TEXT, stream_delay_ms=40)])
    modes = ["messages-tuple", "values"]
    async with (
        proxy(lg.url, prefix=PREFIX) as front,
        get_client(url=f"{front.url}{PREFIX}/langgraph", api_key=lg.key, timeout=60) as client,
    ):
        thread = (await client.threads.create(graph_id="worker"))["thread_id"]
        parts: list[StreamPart] = []
        async with asyncio.timeout(WAIT):
            async for part in client.runs.stream(
                thread, "worker", input=ask(key), stream_mode=modes
            ):
                parts.append(part)
                if part.event == "messages" and front.cuts == 0:
                    front.cut()  # mid-answer: the SDK reconnects through the proxy
        assert front.cuts == 1
        rejoins = [r for r in front.requests if r.startswith(b"GET ") and b"/stream" in r]
        assert rejoins and all(r.startswith(b"GET /langgraph/threads/") for r in rejoins)
    run_id = parts[0].data["run_id"]
    full = await collect(lg.client.runs.join_stream(thread, run_id, stream_mode=modes))
    kept = [(p.event, p.id, p.data) for p in parts if p.event != "metadata"]
    assert kept == [(p.event, p.id, p.data) for p in full if p.event != "metadata"]
    answer = "".join(p.data[0]["content"] for p in parts if p.event == "messages")
    assert answer == TEXT


async def test_the_console_and_schema_pages_name_their_assets_under_the_prefix(
    lg: LangGraph,
) -> None:
    async with (
        proxy(lg.url, prefix=PREFIX) as front,
        httpx.AsyncClient(base_url=f"{front.url}{PREFIX}", timeout=WAIT) as http,
    ):
        page = (await http.get("/")).text
        assets = re.findall(r'(?:href|src)="(/[^"]+)"', page)
        assert assets and all(a.startswith(f"{PREFIX}/console/") for a in assets), assets
        assert f'<meta name="agency-root" content="{PREFIX}">' in page
        for asset in assets:  # each loads through the proxy
            got = await http.get(asset.removeprefix(PREFIX))
            assert got.status_code == 200, asset
        schema = (await http.get("/schema")).text
        assert f'src="{PREFIX}/console/vendor/redoc/redoc.standalone.js"' in schema
    async with httpx.AsyncClient(base_url=lg.url, timeout=WAIT) as http:
        direct = (await http.get("/")).text
    assert '"/console/js/app.js"' in direct and 'name="agency-root" content=""' in direct


def test_the_setting_names_addresses_networks_or_any() -> None:
    proxies = TrustedProxies.parse(" 10.0.0.0/8 , 127.0.0.1, ::1 ")
    assert proxies.trusts("10.2.3.4") and proxies.trusts("127.0.0.1") and proxies.trusts("::1")
    assert not proxies.trusts("192.168.1.1") and not proxies.trusts("not-an-address")
    assert TrustedProxies.parse("*").trusts("198.51.100.1")
    assert not TrustedProxies.parse("").enabled
    with pytest.raises(TrustedProxiesError, match=r"AGENCY_TRUSTED_PROXIES: 'proxy\.local'"):
        TrustedProxies.parse("proxy.local")


async def _seen(peer: str, headers: dict[str, str], trusted: str = "10.0.0.0/8") -> Any:
    """The scope the app sees after the middleware, for a request from `peer`."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {
        "type": "http", "method": "GET", "path": "/", "headers": [(b"host", b"api:8080"), *raw],
        "client": (peer, 5000), "scheme": "http",
    }  # fmt: skip
    middleware = ForwardedMiddleware(TrustedProxies.parse(trusted))
    await middleware.handle(scope, None, None, app)  # type: ignore[arg-type]
    return seen


FORWARDED = {
    "X-Forwarded-For": "203.0.113.9, 10.0.0.5",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "agents.example.com",
    "X-Forwarded-Prefix": "/agency/",
}


async def test_a_trusted_proxy_says_what_the_client_asked_for() -> None:
    seen = await _seen("10.0.0.1", FORWARDED)
    assert seen["client"][0] == "203.0.113.9"  # the nearest hop not a trusted proxy
    assert seen["scheme"] == "https"
    assert (b"host", b"agents.example.com") in seen["headers"]
    assert forwarded_prefix(seen) == "/agency"


async def test_a_peer_not_trusted_cannot_claim_an_address_a_host_or_a_prefix() -> None:
    seen = await _seen("192.0.2.10", FORWARDED)
    assert seen["client"][0] == "192.0.2.10" and seen["scheme"] == "http"
    assert (b"host", b"api:8080") in seen["headers"]
    assert forwarded_prefix(seen) == ""


@pytest.mark.parametrize(
    "prefix", ["agency", "/a/../b", "/a//b", '/a"><script>', "/a b", "//evil.example"]
)
async def test_a_prefix_that_is_not_a_plain_path_is_ignored(prefix: str) -> None:
    seen = await _seen("10.0.0.1", {"X-Forwarded-Prefix": prefix})
    assert forwarded_prefix(seen) == ""
