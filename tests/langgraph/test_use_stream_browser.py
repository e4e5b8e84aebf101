"""A page built on `useStream` (@langchain/langgraph-sdk/react, React, bundled by esbuild
from npm: tests/js/web/chat.jsx), served on an origin of its own, in Debian's chromium
driven by Playwright, against the whole system: a message sent, its tokens seen arriving,
an interrupt approved, the page reloaded in the middle of the run that follows, and that
run seen going on after the reload to its end, nothing lost and nothing twice."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page

from agency.services.llm.fake_scripts import ScriptStep
from tests.browser import FIRST, SECOND, until_shown
from tests.jsclients import Site, built_site
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import call


@pytest.fixture(scope="module")
async def site(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Site]:
    async with built_site("web/chat.jsx", tmp_path_factory) as served:
        yield served


class Tab:
    """A page and what it logged; waits fail saying what the page showed."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.logged: list[str] = []
        page.on("pageerror", lambda e: self.logged.append(f"page error: {e}"))
        page.on("console", self._console)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            self.logged.append(f"console {message.type}: {message.text}")

    async def until(self, condition: str, what: str) -> None:
        """Wait (bounded) until the JS `condition` holds, or the page shows an error."""
        await until_shown(self.page, condition, what, self.logged)

    async def shown(self) -> list[list[dict[str, Any]]]:
        return list(await self.page.evaluate("window.shown"))

    async def messages(self) -> list[tuple[str, str]]:
        items = self.page.locator("#messages li")
        return [
            (
                (await items.nth(i).get_attribute("class") or "").split()[-1],
                await items.nth(i).inner_text(),
            )
            for i in range(await items.count())
        ]


def _partials(shown: list[list[dict[str, Any]]], index: int, whole: str) -> list[str]:
    """The texts message `index` was shown with that were a part of `whole`, not all of it."""
    texts = [m[index]["text"] for m in shown if len(m) > index]
    return list(dict.fromkeys(t for t in texts if t and t != whole and whole.startswith(t)))


def _last_ai(index: int) -> str:
    return f"(document.querySelectorAll('#messages li')[{index}]?.innerText ?? '')"


async def test_use_stream_streams_approves_and_rejoins_after_a_reload(
    lg: LangGraph, site: Site, browser: Browser
) -> None:
    key = f"page-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(content=FIRST, tool_calls=[call("lookup", word="w")], stream_delay_ms=60),
            ScriptStep(content=SECOND, stream_delay_ms=200),
        ],
    )
    context = await browser.new_context()
    try:
        tab = Tab(await context.new_page())
        query = urlencode({"api": f"{lg.url}/langgraph", "key": lg.key, "assistant": "approver"})
        await tab.page.goto(f"{site.url}/index.html?{query}")
        await tab.page.fill("#draft", key)
        await tab.page.click("#send")

        # The model's first answer arrives token by token, then its call awaits approval.
        await tab.until("document.querySelector('#approve')", "the interrupt")
        assert len(_partials(await tab.shown(), 1, FIRST)) > 1, "the tokens came one by one"
        requests = await tab.page.locator("#interrupt .request").all_inner_texts()
        assert requests == ['lookup {"word":"w"}']
        thread = dict(p.split("=", 1) for p in tab.page.url.split("?", 1)[1].split("&"))["thread"]
        assert (await lg.client.threads.get(thread))["status"] == "interrupted"

        # Approved: the tool runs and the answer streams; the page is reloaded mid-answer.
        await tab.page.click("#approve")
        partial = f"{_last_ai(3)}.length > 0 && {_last_ai(3)}.length < {len(SECOND)}"
        await tab.until(partial, "the answer after the approval")
        before = (await tab.messages())[3][1]
        await tab.page.reload()

        # The page comes back to its thread and rejoins the run: the answer goes on
        # streaming to its end, with nothing lost and nothing twice.
        done = f"{_last_ai(3)} === {SECOND!r} && document.querySelector('#status').innerText === 'idle'"
        await tab.until(done, "the answer after the reload")
        after = _partials(await tab.shown(), 3, SECOND)
        assert any(len(t) > len(before) for t in after), (
            f"the tokens went on arriving after the reload (shown at the reload: {before!r}; "
            f"after it: {after!r})"
        )
        messages = await tab.messages()
        assert [kind for kind, _ in messages] == ["human", "ai", "tool", "ai"], messages
        assert [messages[0][1], messages[1][1], messages[3][1]] == [key, FIRST, SECOND]
        state = await lg.client.threads.get_state(thread)
        assert [m["content"] for m in state["values"]["messages"]][-1] == SECOND
        assert len(state["values"]["messages"]) == 4
    finally:
        await context.close()
