"""A page built on `@ag-ui/client`'s HttpAgent (bundled by esbuild from npm:
tests/js/web/agui-chat.js), served on an origin of its own, in Debian's chromium driven by
Playwright, against `/agui` on another origin: the preflights pass for the origins the
operator allows, a message is sent, its answer is seen streaming in, and the interrupt of
its held tool call is approved, the run going on to its end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import httpx
import pytest
from playwright.async_api import Browser, ConsoleMessage

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.browser import FIRST, SECOND, until_shown
from tests.jsclients import Site, built_site
from tests.langgraph.conftest import APP_ORIGIN
from tests.protocols.agui.conftest import Tenant


@pytest.fixture(scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    async with built_site("web/agui-chat.js", tmp_path_factory) as served:
        yield served


async def _preflight(tenant: Tenant, origin: str) -> httpx.Response:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.options(tenant.route("approver"), headers=headers)


async def test_the_preflights_pass_for_the_allowed_origins_only(tenant: Tenant) -> None:
    for origin in (APP_ORIGIN, "http://localhost:5173"):
        allowed = await _preflight(tenant, origin)
        assert allowed.is_success, allowed.text
        assert allowed.headers["access-control-allow-origin"] == origin
        assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    refused = await _preflight(tenant, "https://elsewhere.example")
    assert refused.status_code == 403, refused.text
    assert "access-control-allow-origin" not in refused.headers


async def test_a_page_on_another_origin_streams_and_approves(
    tenant: Tenant, site: Site, browser: Browser
) -> None:
    key = f"agui-page-{tenant.agency}"
    lookup = ScriptToolCall(name="lookup", arguments={"word": "w"})
    tenant.llm.script(
        key,
        [
            ScriptStep(content=FIRST, tool_calls=(lookup,), stream_delay_ms=60),
            ScriptStep(content=SECOND, stream_delay_ms=60),
        ],
    )
    context = await browser.new_context()
    logged: list[str] = []
    try:
        page = await context.new_page()
        page.on("pageerror", lambda e: logged.append(f"page error: {e}"))

        def console(message: ConsoleMessage) -> None:
            if message.type in ("error", "warning"):
                logged.append(f"console {message.type}: {message.text}")

        page.on("console", console)
        thread = str(uuid.uuid4())
        query = {"api": tenant.route("approver"), "key": tenant.key, "thread": thread}
        await page.goto(f"{site.url}/index.html?{urlencode(query)}")
        await page.fill("#draft", key)
        await page.click("#send")

        # The first answer streams in piece by piece, then its call awaits approval.
        await until_shown(page, "document.querySelector('#approve')", "the interrupt", logged)
        shown = list(await page.evaluate("window.shown"))
        assert shown[-1] == FIRST
        partial = {t for t in shown if t != FIRST and FIRST.startswith(t)}
        assert len(partial) > 1, f"the text came in pieces: {shown}"
        assert await page.locator("#status").inner_text() == "interrupted"
        items = page.locator("#messages li")
        assert (await items.nth(1).inner_text()).startswith(f"{FIRST} lookup {{")

        # Approved: the call runs and the next answer streams to its end.
        await page.click("#approve")
        done = (
            "document.querySelector('#status').innerText === 'idle' && "
            "document.querySelectorAll('#messages li').length === 4"
        )
        await until_shown(page, done, "the answer after the approval", logged)
        texts = await page.locator("#messages li").all_inner_texts()
        classes = [await items.nth(i).get_attribute("class") for i in range(4)]
        assert classes == ["user", "assistant", "tool", "assistant"]
        assert texts[0] == key and texts[2] == "definition of w" and texts[3] == SECOND
        after = list(await page.evaluate("window.shown"))[len(shown) :]
        assert after[-1] == SECOND
        assert len({t for t in after if t != SECOND and SECOND.startswith(t)}) > 1, after
    finally:
        await context.close()
