"""A workflow in the console, in a real browser, on real data: the channel run by run with
who spoke at which hop, the members and their threads, a team document and a closed
proposal, a message posted from the page starting a second run, and the filters."""

from __future__ import annotations

import re

from playwright.async_api import Page, expect

from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import Stack, Tenant, shot
from tests.helpers import assert_eventually

DRAFT = "# Release note\n\nThe console now shows **workflows**: the channel, run by run."


def tool(name: str, **arguments: object) -> ScriptStep:
    return ScriptStep(tool_calls=[{"name": name, "arguments": arguments}])


async def test_a_workflow_channel_run_by_run_with_members_documents_and_proposals(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    t = tenant.id
    stack.llm.script(f"writer-{t}", [
        tool("team_doc_write", path="draft.md", content=DRAFT),
        tool("proposal_open", title="Publish the note?", options=["yes", "no"],
             voters=["reviewer"]),
        ScriptStep(content="The draft is in `draft.md`. @reviewer please vote."),
        ScriptStep(content="Revised: the note now says *run by run*."),
    ])  # fmt: skip
    stack.llm.script(f"reviewer-{t}", [
        tool("proposal_vote", choice="yes", reason="it reads well"),
        ScriptStep(content="Voted **yes**: it reads well."),
    ])  # fmt: skip
    definition = (
        "name: note\nagents:\n"
        f"  writer: {{system_prompt: 'Your script is writer-{t}.'}}\n"
        f"  reviewer: {{system_prompt: 'Your script is reviewer-{t}.'}}\n"
    )
    async with tenant.http(stack) as http:
        r = await http.post("/agencies", json={"name": "Newsroom"})
        assert r.status_code == 201, r.text
        agency = r.json()["id"]
        r = await http.post(
            f"/agency/{agency}/workflows", json={"definition": definition, "tag": "v1"}
        )
        assert r.status_code == 201, r.text
        wf = r.json()["id"]
        r = await http.post(
            f"/agency/{agency}/workflows/note:v1/messages",
            json={"content": "@writer please draft the release note"},
        )
        assert r.status_code == 202, r.text

        async def settled() -> None:
            r = await http.get(f"/agency/{agency}/workflows/note:v1")
            view = r.json()
            assert view["messageCount"] == 3, view
            assert {m["status"] for m in view["members"]} == {"idle"}, view

        await assert_eventually(settled, timeout=60)

    # The list, and from it the workflow.
    await page.goto(f"{stack.url}/#/a/{agency}/workflows")
    await expect(page.locator("#nav a.on")).to_have_text("Workflows")
    row = page.locator("#workflows tr", has_text="@note:v1")
    await expect(row).to_contain_text("@writer")
    await row.locator("a").click()
    await expect(page).to_have_url(re.compile(rf"#/a/{agency}/w/{wf}$"))
    await expect(page.locator(".thead .title")).to_have_text("@note:v1")
    await expect(page.locator(".thead .badge")).to_have_text("settled")

    # The channel: who said what at which hop, mentions marked, markdown rendered.
    messages = page.locator("#channel .chmsg")
    await expect(messages).to_have_count(3)
    assert await messages.evaluate_all("ns => ns.map(n => n.dataset.sender)") == [
        "user",
        "writer",
        "reviewer",
    ]
    await expect(messages.nth(0).locator(".who")).to_contain_text("hop 0")
    await expect(messages.nth(1).locator(".mention")).to_have_text("@reviewer")
    await expect(messages.nth(2).locator("strong")).to_have_text("yes")
    await expect(page.locator("#channel .run-divider")).to_have_count(1)

    # Members with their threads; the document; the proposal, closed by the reviewer's vote.
    members = page.locator("#wf-members tr")
    await expect(members).to_have_count(2)
    writer = members.filter(has_text="@writer")
    await expect(writer).to_contain_text("1 run")
    await page.locator("#wf-side details.doc summary").click()
    await expect(page.locator("#wf-side details.doc h1")).to_have_text("Release note")
    proposal = page.locator("#wf-side .proposal")
    await expect(proposal).to_contain_text("Publish the note?")
    await expect(proposal).to_contain_text("@reviewer → yes")
    await expect(proposal.locator("li.won")).to_have_text("yes: 1")
    await expect(proposal).to_contain_text("outcome: yes")

    # A message from the page starts the workflow's second run.
    await page.fill("#wf-message", "@writer one more pass, please")
    await page.click("#wf-send")
    await expect(messages).to_have_count(5, timeout=30_000)
    await expect(messages.nth(4)).to_contain_text("Revised: the note now says run by run.")
    await expect(page.locator("#channel .run-divider")).to_have_count(2)
    await expect(page.locator("#channel .run-divider").nth(1)).to_contain_text("run #2")
    await expect(writer).to_contain_text("2 runs")
    await shot(page, "workflow")

    # Filters: one run; one member's inbox.
    await page.select_option("#wf-run", index=1)
    await expect(messages).to_have_count(3)
    await page.select_option("#wf-run", index=0)
    await page.select_option("#wf-member", "reviewer")
    await expect(messages).to_have_count(1)
    await expect(messages.nth(0)).to_have_attribute("data-sender", "writer")

    # A member is a thread: its chat is one click away.
    await members.filter(has_text="@reviewer").locator("a").click()
    await expect(page).to_have_url(re.compile(rf"#/a/{agency}/t/wfm_[a-z0-9]+$"))
    await expect(page.locator("#transcript")).to_contain_text("Voted yes: it reads well.")
