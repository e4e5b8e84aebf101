"""Steering a thread from the console: a held call rejected, a running run interrupted by
a new message, and the timeline narrowed to one run."""

from __future__ import annotations

from playwright.async_api import Page, expect

from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import Stack, Tenant
from tests.console.test_scale import agency_of


async def test_reject_a_held_call_interrupt_a_run_and_filter_the_timeline_by_run(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    # The longest key found in the conversation picks the script; a step is picked by the
    # assistant messages so far (two after the first run, whose answer ends it).
    held = "ctl-" + new_id()
    slow, fresh = held + "-slow", held + "-slow-interrupted"
    stack.llm.script(held, [
        ScriptStep(tool_calls=[{"name": "lookup", "arguments": {"word": "secret"}}]),
        ScriptStep(content="Answered without the lookup."),
    ])  # fmt: skip
    unused = ScriptStep(content="unused")
    stack.llm.script(slow, [unused, unused, ScriptStep(content="too slow", delay_ms=20_000)])
    stack.llm.script(fresh, [unused, unused, ScriptStep(content="The interrupting answer.")])
    thread = await tenant.new_thread(stack, agency, "approver")
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}")
    status = page.locator(".thead .badge").first

    # The held lookup is rejected: the run goes on without it.
    await page.fill("#message", held)
    await page.click("#send")
    hitl = page.locator("#hitl")
    await expect(hitl).to_contain_text("lookup")
    await hitl.locator("button[data-action='reject']").click()
    await expect(page.locator("#hitl-submit")).to_have_text("Reject")
    await page.click("#hitl-submit")
    await expect(status).to_have_text("completed")
    await expect(page.locator("#transcript")).to_contain_text("Answered without the lookup.")
    await expect(hitl).to_have_count(0)

    # A message sent with "interrupt" cancels the running run and starts its own.
    await page.fill("#message", slow)
    await page.click("#send")
    await expect(status).to_have_text("running")
    await page.select_option("#strategy", "interrupt")
    await page.fill("#message", fresh)
    await page.click("#send")
    await expect(page.locator("#transcript")).to_contain_text("The interrupting answer.")
    await expect(status).to_have_text("completed")

    await page.click("nav.tabs a[data-tab='timeline']")
    rows = page.locator("#timeline .vrow")
    await page.select_option("#tl-type", "type:hitl.resume")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("rejected")
    await page.select_option("#tl-type", "type:run.canceled")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("interrupted by a new request")
    # Three runs; the first one alone holds the rejected approval and no cancel.
    await page.select_option("#tl-type", "nodelta")
    run_options = page.locator("#tl-run option")
    await expect(run_options).to_have_count(4)
    first_run = await run_options.nth(1).get_attribute("value")
    await page.select_option("#tl-run", index=1)
    types = await rows.evaluate_all("rs => rs.map(r => [r.dataset.run, r.dataset.type])")
    assert types and {run for run, _ in types} == {first_run}
    assert "hitl.resume" in {t for _, t in types} and "run.canceled" not in {t for _, t in types}


async def test_terminate_a_running_thread_from_its_page(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    key = "term-" + new_id()
    stack.llm.script(key, [ScriptStep(content="never shown", delay_ms=20_000)])
    thread = await tenant.new_thread(stack, agency, "approver")
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}")
    status = page.locator(".thead .badge").first
    await page.fill("#message", key)
    await page.click("#send")
    await expect(status).to_have_text("running")

    # The button asks first: dismissed, nothing is sent; accepted, the thread shuts down.
    page.once("dialog", lambda dialog: dialog.dismiss())
    await page.click("#terminate")
    await expect(page.locator("#terminate")).to_have_text("Terminate")
    await expect(status).to_have_text("running")
    page.once("dialog", lambda dialog: dialog.accept())
    await page.click("#terminate")
    await expect(status).to_have_text("canceled · terminated")
    await expect(page.locator("#terminate")).to_have_text("Terminated")
    await expect(page.locator("#terminate")).to_be_disabled()

    # A terminated thread refuses a new message, and the console says why.
    await page.fill("#message", "are you there?")
    await page.click("#send")
    await expect(page.locator("#flash.error")).to_contain_text("terminated")


async def test_a_run_paused_at_a_breakpoint_goes_on_from_its_page(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    key = "bp-" + new_id()
    stack.llm.script(key, [ScriptStep(content="Answered after the breakpoint.")])
    async with tenant.http(stack) as http:
        r = await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
        assert r.status_code == 201, r.text
        thread = r.json()["id"]
        # A LangGraph run that pauses before its model call.
        r = await http.post(
            f"/langgraph/threads/{thread}/runs",
            json={
                "assistant_id": "worker",
                "input": {"messages": [{"role": "user", "content": key}]},
                "interrupt_before": ["model"],
            },
        )
        assert r.status_code == 200, r.text
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}")
    status = page.locator(".thead .badge").first
    await expect(status).to_have_text("paused · breakpoint")
    await expect(page.locator("#hitl")).to_contain_text("breakpoint before the model call")
    await page.click("#breakpoint-go")
    await expect(status).to_have_text("completed")
    await expect(page.locator("#transcript")).to_contain_text("Answered after the breakpoint.")
    await expect(page.locator("#hitl")).to_have_count(0)
