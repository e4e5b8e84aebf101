"""Debian's chromium driven by Playwright (never a downloaded browser), as every browser
test opens it: the console's, and the pages built from npm packages that a frontend on
another origin would serve (`tests/jsclients.py`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from playwright.async_api import Browser, async_playwright

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
