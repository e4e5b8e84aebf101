"""A code agent's settings in the console: the thread's Settings tab shows each field of the
schema with its type, default and value, saves the agency's overrides (the next run uses
them) and shows what the API refuses; the blueprint view shows the same panel."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.api.code_agents import TUNER
from tests.console.conftest import Stack, Tenant, shot
from tests.console.test_scale import agency_of


async def test_the_settings_tab_shows_and_saves_a_code_agents_settings(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    thread = await tenant.new_thread(stack, agency, TUNER)
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}")
    transcript = page.locator("#transcript")
    await page.fill("#message", "first")
    await page.click("#send")
    await expect(transcript).to_contain_text("warm (100): first")

    await page.click("nav.tabs a[data-tab='settings']")
    panel = page.locator("#settings-panel")
    rows = panel.locator("tr[data-field]")
    await expect(rows).to_have_count(4)
    tone = panel.locator("tr[data-field='tone']")
    await expect(tone.locator("td").nth(1)).to_have_text("string")
    await expect(tone.locator("td").nth(2)).to_have_text("plain")
    await expect(tone.locator("input")).to_have_value("warm")
    await expect(tone).to_contain_text("registered")
    words = panel.locator("tr[data-field='max_words']")
    await expect(words.locator("td").nth(1)).to_have_text("integer")
    await expect(words.locator("input")).to_have_value("100")
    topics = panel.locator("tr[data-field='topics']")
    await expect(topics.locator("td").nth(1)).to_have_text("array of string")
    await expect(topics.locator("input")).to_have_value("[]")
    await expect(panel.locator("tr[data-field='temperature'] input")).to_have_value("0.2")

    # A value the schema refuses: the API's 400 names the field.
    await words.locator("input").fill("many")
    await page.click("#save-settings")
    await expect(page.locator("#settings-error")).to_contain_text("settings field 'max_words'")
    await shot(page, "settings")

    await words.locator("input").fill("3")
    await tone.locator("input").fill("brisk")
    await page.click("#save-settings")
    await expect(words).to_contain_text("agency")
    await expect(page.locator("#settings-error")).to_have_text("")
    await expect(words.locator("input")).to_have_value("3")

    # The next run gets them.
    await page.click("nav.tabs a[data-tab='chat']")
    await page.fill("#message", "second")
    await page.click("#send")
    await expect(transcript).to_contain_text("brisk (3): second")

    # The blueprint view shows the same panel; reset goes back to the registered ones.
    await page.goto(f"{stack.url}/#/a/{agency}/blueprints/{TUNER}")
    panel = page.locator("#settings-panel")
    await expect(panel.locator("tr[data-field='tone'] input")).to_have_value("brisk")
    await page.click("#reset-settings")
    await expect(panel.locator("tr[data-field='tone'] input")).to_have_value("warm")
    await expect(panel.locator("tr[data-field='max_words'] input")).to_have_value("100")
