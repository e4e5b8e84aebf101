"""`/schema`, the API's documentation page, works offline: every script, style and icon
it names is served by the API itself, and in a browser that can reach nothing but the API,
Redoc renders the document (its title and each operation's)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import httpx
from playwright.async_api import Browser, Route, expect

from tests.console.conftest import Stack


class _Assets(HTMLParser):
    """The URLs a page loads by itself: `src` of any element, `href` of `<link>`."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (name == "src" or (tag == "link" and name == "href")):
                self.urls.append(value)


async def test_the_schema_page_loads_only_what_the_api_serves(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=20) as http:
        page = await http.get("/schema")
        assert page.status_code == 200, page.text
        parser = _Assets()
        parser.feed(page.text)
        scripts = [u for u in parser.urls if u.endswith(".js")]
        assert scripts, parser.urls
        for url in parser.urls:
            if url.startswith("data:"):
                continue
            absolute = urljoin(f"{stack.url}/schema", url)
            assert urlsplit(absolute).netloc == urlsplit(stack.url).netloc, url
            asset = await http.get(absolute)
            assert asset.status_code == 200 and asset.content, (url, asset.status_code)
        for url in scripts:
            asset = await http.get(urljoin(f"{stack.url}/schema", url))
            assert "javascript" in asset.headers["content-type"], (url, asset.headers)


async def test_redoc_renders_the_document_with_no_network_but_the_api(
    browser: Browser, stack: Stack
) -> None:
    origin = urlsplit(stack.url).netloc
    elsewhere: list[str] = []

    async def only_the_api(route: Route) -> None:
        url = route.request.url
        if url.startswith("data:") or urlsplit(url).netloc == origin:
            await route.continue_()
        else:
            elsewhere.append(url)
            await route.abort("internetdisconnected")

    context = await browser.new_context(viewport={"width": 1440, "height": 880})
    try:
        await context.route("**/*", only_the_api)
        tab = await context.new_page()
        tab.set_default_timeout(30_000)
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        await tab.goto(f"{stack.url}/schema")
        title = tab.get_by_role("heading", name="Agency API", level=1)
        await expect(title).to_be_visible(timeout=30_000)
        # An operation, in Redoc's menu and, once chosen there, as its section's title.
        entry = tab.get_by_role("menuitem", name="Create a thread", exact=True)
        await expect(entry).to_be_visible()
        await entry.click()
        section = tab.locator("h2").filter(has_text=re.compile(r"^Create a thread\s*$"))
        await expect(section).to_be_in_viewport(timeout=15_000)
    finally:
        await context.close()
    assert not errors, errors
    assert not elsewhere, elsewhere
