"""The console on a busy tenant: a thousand threads in the side bar, a thread of ten
thousand events in the timeline, and a live stream that loses its connection mid-run."""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import Page, expect

from agency.contracts.events import (
    ChatMessage,
    MessageAppended,
    ParentRef,
    RunStarted,
    ThreadCreated,
)
from agency.contracts.ids import new_id
from agency.infra.jetstream.records import EventContext, Position
from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import NETWORK_ERRORS_EXPECTED, CuttableProxy, Stack, Tenant, shot
from tests.helpers import assert_eventually

ROOTS = 1000


async def agency_of(stack: Stack, tenant: Tenant) -> str:
    async with tenant.http(stack) as http:
        r = await http.post("/agencies", json={"name": "Busy desk"})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


async def create_threads(stack: Stack, tenant: Tenant, agency: str) -> tuple[list[str], str]:
    """ROOTS root threads written straight to the log (as the registry would), every tenth
    a manager with two workers below it, the first five of them running. Returns the root
    ids and one child's id."""
    store = stack.bus.store
    roots = [new_id() for _ in range(ROOTS)]
    children: list[tuple[str, str]] = []

    async def create(thread: str, agent_type: str, parent: str | None) -> None:
        context = EventContext(agency_id=agency, thread_id=thread, correlation_id=parent or thread)
        ref = ParentRef(thread_id=parent, token=new_id()) if parent else None
        payload = ThreadCreated(agency_id=agency, agent_type=agent_type, parent=ref)
        result = await store.append(
            tenant.id, "thread", thread, [payload], expected=Position(), context=context
        )
        if parent is None and roots.index(thread) < 50 and roots.index(thread) % 10 == 0:
            run = RunStarted(run_id="run_" + new_id(), agent_type=agent_type, max_steps=25)
            await store.append(
                tenant.id, "thread", thread, [run], expected=result.position, context=context
            )

    for start in range(0, ROOTS, 50):
        batch = roots[start : start + 50]
        await asyncio.gather(
            *(create(t, "manager" if i % 10 == 0 else "worker", None) for i, t in enumerate(batch))
        )
        for t in batch[::10]:
            children.extend((new_id(), t) for _ in range(2))
    await asyncio.gather(*(create(child, "worker", parent) for child, parent in children))

    async def projected() -> None:
        async with tenant.http(stack) as http:
            page = (await http.get(f"/agency/{agency}/threads", params={"limit": 1})).json()
        assert sum(page["statusCounts"].values()) == ROOTS + len(children), page

    await assert_eventually(projected, timeout=60, interval=0.5)
    return roots, children[-1][0]


async def test_a_thousand_threads_page_filter_and_search(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    roots, child = await create_threads(stack, tenant, agency)
    await page.goto(f"{stack.url}/#/a/{agency}")
    side = page.locator("#side")
    await expect(side.locator(".tree-more")).to_contain_text(f"50 trees · {ROOTS + 200} threads")
    # Newest first.
    first = await side.locator(".tnode").first.get_attribute("data-id")
    assert first in roots[-50:]
    await side.locator(".tree-more button").click()
    await expect(side.locator(".tree-more")).to_contain_text("100 trees")

    await side.locator("select[title='status']").select_option("running")
    await expect(side.locator(".tnode:not(.nomatch)")).to_have_count(5)
    await expect(side.locator(".tnode .badge.running")).to_have_count(5)
    await side.locator("select[title='status']").select_option("")

    await side.locator("input[type='search']").fill(child[-10:])
    found = side.locator(f".tnode[data-id='{child}']")
    await expect(found).to_be_visible()
    await expect(found).not_to_have_class(re.compile("nomatch"))
    # The match is shown in its tree: the manager above it, dimmed.
    await expect(side.locator(".tnode")).to_have_count(3)
    await expect(side.locator(".tnode.nomatch")).to_have_count(2)
    await side.locator("input[type='search']").fill("")
    await side.locator("select[title='agent type']").select_option("manager")
    await expect(side.locator(".tnode:not(.nomatch)")).to_have_count(50)
    await expect(side.locator(".tnode.nomatch")).to_have_count(100)  # their workers
    await shot(page, "threads")


@pytest.mark.slow
async def test_timeline_of_ten_thousand_events_pages_and_renders_only_what_is_seen(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    thread = await tenant.new_thread(stack, agency)
    store = stack.bus.store
    context = EventContext(agency_id=agency, thread_id=thread, correlation_id=thread)
    position = await store.last_position(tenant.id, "thread", thread)
    for start in range(0, 10_000, 1000):
        notes = [
            MessageAppended(message=ChatMessage(role="user", content=f"note {i}"))
            for i in range(start, start + 1000)
        ]
        result = await store.append(
            tenant.id, "thread", thread, notes, expected=position, context=context
        )
        position = result.position

    async def projected() -> None:
        async with tenant.http(stack) as http:
            view = (await http.get(f"/agency/{agency}/agent/{thread}")).json()
        assert view["lastSeq"] == 10_001, view["lastSeq"]

    await assert_eventually(projected, timeout=60, interval=0.5)
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}/timeline")
    timeline = page.locator("#timeline")
    count = page.locator(".tl-tools .muted")
    await expect(count).to_have_text("500 events loaded, more on scroll")
    assert await timeline.locator(".vrow").count() < 80
    # Scrolling to the end loads the rest, a page at a time.
    for _ in range(30):
        text = await count.text_content()
        if text == "10001 events":
            break
        await timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
        await expect(count).not_to_have_text(text or "")
    await expect(count).to_have_text("10001 events")
    await timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
    await expect(timeline.locator(".vrow[data-seq='10001']")).to_be_visible()
    assert await timeline.locator(".vrow").count() < 80
    await shot(page, "timeline-10k")


async def test_live_stream_resumes_after_a_lost_connection_without_gap_or_duplicate(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    key = "reconnect-" + new_id()
    todo = {"name": "write_todos", "arguments": {"todos": [{"content": "x", "status": "pending"}]}}
    steps = [ScriptStep(tool_calls=[todo], delay_ms=300) for _ in range(6)]  # type: ignore[list-item]
    stack.llm.script(key, [*steps, ScriptStep(content="done", delay_ms=300)])
    NETWORK_ERRORS_EXPECTED.add(id(page))
    async with tenant.http(stack) as http, CuttableProxy(stack.url) as proxy:
        r = await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
        thread = r.json()["id"]
        await page.goto(f"{proxy.url}/#key={tenant.key}")
        await page.goto(f"{proxy.url}/#/a/{agency}/t/{thread}")
        live = page.locator(".thead .badge.live")
        await expect(live).to_have_text("live")
        r = await http.post(
            f"/agency/{agency}/agent/{thread}/invoke",
            json={"messages": [{"role": "user", "content": key}]},
        )
        assert r.status_code == 202, r.text
        status = page.locator(".thead .badge").first
        await expect(status).to_have_text("running")
        # The connection drops mid-run: EventSource reconnects by itself with Last-Event-ID.
        before = await page.evaluate("window.agencyFeed.delivered.length")
        assert proxy.cut() > 0
        await expect(page.locator(".thead .badge.offline")).to_be_visible()
        await expect(live).to_have_text("live", timeout=15_000)
        await page.wait_for_function(f"window.agencyFeed.delivered.length > {before}")
        # The feed can also reconnect on its own, from the last seq it delivered.
        await page.evaluate("window.agencyFeed.reconnect()")
        await expect(status).to_have_text("completed", timeout=30_000)
        view = (await http.get(f"/agency/{agency}/agent/{thread}")).json()
    delivered = await page.evaluate("window.agencyFeed.delivered")
    assert delivered == list(range(delivered[0], view["lastSeq"] + 1)), delivered


async def test_cancel_and_a_rejected_message_from_the_thread_view(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    agency = await agency_of(stack, tenant)
    key = "cancel-" + new_id()
    slow = ScriptStep(content="too slow", delay_ms=20_000)
    stack.llm.script(key, [slow])
    stack.llm.script(key + "-again", [slow])
    thread = await tenant.new_thread(stack, agency)
    await page.goto(f"{stack.url}/#/a/{agency}/t/{thread}")
    status = page.locator(".thead .badge").first
    await page.fill("#message", key)
    await page.click("#send")
    await expect(status).to_have_text("running")
    await page.click("#cancel")
    await expect(status).to_have_text("canceled · canceled from the console")
    await expect(page.locator("#cancel")).to_be_disabled()

    # A message sent with strategy "reject" while a run is active is refused.
    await page.fill("#message", key + "-again")
    await page.click("#send")
    await expect(status).to_have_text("running")
    await page.select_option("#strategy", "reject")
    await page.fill("#message", "and another thing")
    await page.click("#send")
    await expect(page.locator("#message")).to_have_value("")
    await page.click("nav.tabs a[data-tab='timeline']")
    await page.select_option("#tl-type", "type:request.rejected")
    rejected = page.locator("#timeline .vrow[data-type='request.rejected']")
    await expect(rejected).to_contain_text("asked to be rejected")
    async with tenant.http(stack) as http:
        r = await http.post(f"/agency/{agency}/agent/{thread}/cancel", json={})
        assert r.status_code == 202
