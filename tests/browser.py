"""Debian's chromium driven by Playwright (never a downloaded browser), as every browser
test opens it: the console's, and the pages built from npm packages that a frontend on
another origin would serve (`tests/jsclients.py`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = os.environ.get("AGENCY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# How long a page may take to show what a test waits for.
WAIT_MS = 30_000
# What the chat pages' model streams: a first answer with a tool call, then the last one.
FIRST = "Let me look that word up in the dictionary before I answer you"
SECOND = (
    "The dictionary says the word means what you thought it did, and it has been used "
    "that way for a few hundred years by writers of every kind"
)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Chromium launched headless, closed on the way out; the test fails saying how to
    install it where it is missing."""
    if not shutil.which(CHROMIUM):
        pytest.fail(f"no chromium at {CHROMIUM}: apt-get install -y chromium (see .ci/run)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=30_000
        )
        try:
            yield browser
        finally:
            await browser.close()


async def until_shown(page: Page, condition: str, what: str, logged: Sequence[str] = ()) -> None:
    """Wait (bounded) until the JS `condition` holds, or the page shows an error (the test
    then fails with it and what the page `logged`)."""
    await page.wait_for_function(
        f"() => document.querySelector('#error') || ({condition})", timeout=WAIT_MS
    )
    shown = await page.locator("#error").all_inner_texts()
    assert not shown, f"{what}: the page shows an error: {shown}\n" + "\n".join(logged)
