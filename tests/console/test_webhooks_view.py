"""An agency's webhooks in the console, in a real browser: each subscription with its
latest deliveries as the API states them (status, attempts, the last answer or error)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.async_api import Page, expect

from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import Stack, Tenant
from tests.console.test_routes import setup
from tests.helpers import assert_eventually


async def test_the_webhooks_page_shows_subscriptions_and_their_deliveries(
    page: Page, stack: Stack, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENCY_ALLOW_HOSTS", "127.0.0.1")  # for the subscription's URL
    async with tenant.http(stack) as http:
        agency, (thread,) = await setup(http, 1)
        hooks = f"/agency/{agency}/webhooks"
        body = {"url": "http://127.0.0.1:9/hooks", "events": ["run.ended"], "description": "ops"}
        r = await http.post(hooks, json=body)
        assert r.status_code == 201, r.text
        webhook = r.json()["id"]
        key = "webhooks-view-" + thread
        stack.llm.script(key, [ScriptStep(content="done")])
        r = await http.post(
            f"/agency/{agency}/agent/{thread}/invoke",
            json={"messages": [{"role": "user", "content": key}]},
        )
        assert r.status_code == 202, r.text

        async def attempted() -> dict[str, Any]:
            rows = (await http.get(f"{hooks}/{webhook}/deliveries")).json()["deliveries"]
            assert rows and rows[0]["attempts"] >= 1 and rows[0]["lastError"], rows
            return dict(rows[0])

        delivery = await assert_eventually(attempted, timeout=30)
    await page.goto(f"{stack.url}/#/a/{agency}/webhooks")
    card = page.locator(f".webhook[data-id='{webhook}']")
    await expect(card.locator("h2")).to_have_text("http://127.0.0.1:9/hooks")
    await expect(card).to_contain_text("run.ended")
    await expect(card).to_contain_text("ops")
    row = card.locator("table.deliveries tr", has_text=delivery["id"])
    await expect(row).to_contain_text("run.ended")
    await expect(row).to_contain_text(delivery["status"])
    await expect(row).to_contain_text(delivery["lastError"][:20])  # refused, or no connection
    await expect(page.locator("nav a.on")).to_have_text("Webhooks")
