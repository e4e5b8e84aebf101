"""A tool that raised, in the console: the error the model read, and where the tool raised."""

from __future__ import annotations

import os

from playwright.async_api import Page, expect

from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import Stack, Tenant, divide
from tests.console.test_scale import agency_of

# Where `divide` raises (the line after its docstring), named relative to the test's folder.
CODE = divide.__code__
RAISED_AT = f"{os.path.relpath(CODE.co_filename)}, line {CODE.co_firstlineno + 2}, in divide"


async def test_a_tool_that_raised_shows_where_next_to_the_error_the_model_read(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    key = "divide-" + new_id()
    stack.llm.script(key, [
        ScriptStep(tool_calls=[{"name": "divide", "arguments": {"a": 1, "b": 0}}]),
        ScriptStep(content="Division failed."),
    ])  # fmt: skip
    thread = await tenant.new_thread(stack, agency)
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}")
    await page.fill("#message", key)
    await page.click("#send")
    await expect(page.locator(".thead .badge").first).to_have_text("completed")

    call = page.locator("#transcript details.call").first
    await call.locator("summary").click()
    result = call.locator(".result.error")
    await expect(result.locator("pre")).to_have_text("ZeroDivisionError: float division by zero")
    await expect(result.locator(".raised-at")).to_have_text(f"raised at {RAISED_AT}")

    await page.click("nav.tabs a[data-tab='timeline']")
    await page.select_option("#tl-type", "type:tool.error")
    row = page.locator("#timeline .vrow")
    await expect(row).to_have_count(1)
    await expect(row.first).to_contain_text(f"raised at {RAISED_AT}")
