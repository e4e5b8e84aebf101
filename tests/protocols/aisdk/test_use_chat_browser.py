"""A page built on `useChat` (@ai-sdk/react, React, bundled by esbuild from npm:
tests/js/web/aisdk-chat.jsx), served on an origin of its own, in Debian's chromium driven
by Playwright: a message sent, its call approved, the page reloaded in the middle of the
answer that follows, and `resume` bringing back the whole message to its end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from playwright.async_api import Browser

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.browser import SECOND as ANSWER, until_shown
from tests.jsclients import Site, built_site
from tests.protocols.aisdk.conftest import Tenant


@pytest.fixture(scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    async with built_site("web/aisdk-chat.jsx", tmp_path_factory) as served:
        yield served


TEXT = "(document.querySelector('li.assistant li.text:last-child')?.innerText ?? '')"


async def test_use_chat_approves_and_resumes_after_a_reload(
    tenant: Tenant, site: Site, browser: Browser
) -> None:
    key = f"aisdk-page-{tenant.agency}"
    call = ScriptToolCall(name="lookup_guarded", arguments={"word": "w"})
    tenant.llm.script(
        key, [ScriptStep(tool_calls=(call,)), ScriptStep(content=ANSWER, stream_delay_ms=150)]
    )
    chat = f"page-{tenant.agency}"
    query = {"api": tenant.chat_url(), "key": tenant.key, "chat": chat}
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(f"{site.url}/index.html?{urlencode(query)}")
        await page.fill("#draft", key)
        await page.click("#send")
        await until_shown(page, "document.querySelector('#approve')", "the approval request")
        assert await page.locator("li.tool").inner_text() == (
            "tool-lookup_guarded approval-requested"
        )

        # Approved, the SDK sends the answer on; the page is reloaded mid-answer.
        await page.click("#approve")
        await until_shown(page, f"{TEXT}.length > 0 && {TEXT}.length < {len(ANSWER)}", "the answer")
        before = await page.locator("li.assistant li.text").last.inner_text()
        await page.goto(f"{site.url}/index.html?{urlencode({**query, 'resume': '1'})}")

        # `resume` asks the chat's stream: the run's whole message, then the rest live.
        done = f"{TEXT} === {ANSWER!r} && document.querySelector('#status').innerText === 'ready'"
        await until_shown(page, done, "the answer after the reload")
        shown = [texts[-1] for texts in await page.evaluate("window.shown") if texts]
        assert any(len(before) < len(t) < len(ANSWER) for t in shown), (before, shown)
        assert await page.locator("li.tool").inner_text() == (
            "tool-lookup_guarded output-available guarded definition of w"
        )
    finally:
        await context.close()
