"""The side bar holds an agent type of any length: a long one is cut with an ellipsis
(whole in its tooltip) inside the side bar, which never overlaps the main pane, in the
thread tree, its agent-type filter and the new-thread picker alike."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.conftest import Stack, Tenant

# A realistic long name and one long word, each of the 64 characters a name may have.
LONG_NAMES = (
    "customer-support-escalation-triage-agent-for-enterprise-accounts",
    "x" * 64,
)


async def test_long_agent_types_stay_inside_the_side_bar(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    async with tenant.http(stack) as http:
        r = await http.post("/agencies", json={"name": "Long names"})
        assert r.status_code == 201, r.text
        agency = r.json()["id"]
        for name in LONG_NAMES:
            r = await http.post(
                f"/agency/{agency}/blueprints",
                json={"name": name, "description": "Has a long name.", "prompt": "Help."},
            )
            assert r.status_code == 201, r.text
            r = await http.post(f"/agency/{agency}/agents", json={"agentType": name})
            assert r.status_code == 201, r.text
    await page.goto(f"{stack.url}/#/a/{agency}")
    rows = page.locator("#side .tnode")
    await expect(rows).to_have_count(len(LONG_NAMES))
    for name in LONG_NAMES:
        await expect(
            page.locator("#side select").last.locator(f'option[value="{name}"]')
        ).to_be_attached()
        label = page.locator("#side .tnode .type", has_text=name)
        await expect(label).to_have_attribute("title", name)
    side = await page.locator("aside#side").bounding_box()
    main = await page.locator("main#main").bounding_box()
    assert side and main
    assert side["x"] + side["width"] <= main["x"] + 0.5, (side, main)
    assert main["width"] > 600, main
    # Nothing in the side bar reaches past its right edge.
    right = await page.evaluate(
        """() => Math.max(...[...document.querySelectorAll('#side *')]
             .map((e) => e.getBoundingClientRect().right))"""
    )
    assert right <= side["x"] + side["width"] + 0.5, (right, side)
    for row in await rows.all():
        box = await row.bounding_box()
        assert box and box["x"] + box["width"] <= side["x"] + side["width"] + 0.5, (box, side)
