"""A person debugging a multi-agent run in the console, in a real browser, on real data:
an agency and a blueprint made in the browser, a run with a tool, an approval with edited
arguments and a subagent, then every view of it, a re-execution and a fork."""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.async_api import Page, expect

from agency.services.llm.fake_scripts import ScriptStep
from tests.console.conftest import Stack, Tenant, shot

REPORT = """# Event sourcing, in short

The **event log** is the source of truth: state is a fold of the events.

| piece | role |
| --- | --- |
| log | every fact, in order |
| projections | read models, rebuilt from the log |

```python
state = fold(apply, events, initial)
```
"""

CODE = '''"""Replay a thread from its events."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    seq: int
    type: str


def replay(events: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for event in sorted(events, key=lambda e: e.seq):
        counts[event.type] = counts.get(event.type, 0) + 1
    return counts
'''

FINAL = (
    "## Done\n\nI looked up **event log** (you edited my lookup), asked a *worker* for a "
    "summary and wrote `report.md` and `replay.py`.\n\n- the log is the truth\n"
    "- projections can be rebuilt at any time\n- replay needs no model call"
)

LEAD = {
    "name": "lead",
    "description": "Researches a topic with a worker and writes a report.",
    "prompt": "You research, delegate summaries to a worker and write report.md.",
    "tags": ["default", "lookup", "hitl"],
    "config": {"hitl": {"tools": ["lookup"]}, "subagents": {"subagents": ["worker"]}},
}


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


def script(stack: Stack, key: str) -> None:
    todos = [
        {"content": "Look up the term", "status": "in_progress"},
        {"content": "Have a worker summarise it", "status": "pending"},
        {"content": "Write the report", "status": "pending"},
    ]
    done = [{**t, "status": "completed"} for t in todos]
    stack.llm.script(key, [
        ScriptStep(tool_calls=[call("write_todos", todos=todos)]),
        ScriptStep(tool_calls=[call("lookup", word="event sourcing")]),
        ScriptStep(tool_calls=[call("task", description=f"Summarise the event log in notes.md ({key}-child)", subagentType="worker")]),
        ScriptStep(tool_calls=[call("write_file", path="report.md", content=REPORT),
                               call("write_file", path="replay.py", content=CODE),
                               call("write_todos", todos=done)]),
        ScriptStep(content=FINAL, stream_delay_ms=120),
    ])  # fmt: skip
    stack.llm.script(f"{key}-child", [
        ScriptStep(tool_calls=[call("write_file", path="notes.md", content="# Notes\n\nThe log is the truth.")]),
        ScriptStep(content="The event log is the source of truth; read models are rebuilt from it."),
    ])  # fmt: skip


async def api_get(stack: Stack, tenant: Tenant, path: str) -> Any:
    async with tenant.http(stack) as http:
        r = await http.get(path)
        assert r.status_code == 200, r.text
        return r.json()


async def test_console_walkthrough(page: Page, stack: Stack, tenant: Tenant) -> None:
    # Agencies: create one.
    await expect(page.locator("h1")).to_have_text("Agencies")
    await page.fill("input[placeholder='name of the new agency']", "Research desk")
    await page.click("#create-agency")
    await expect(page).to_have_url(re.compile(r"#/a/[A-Za-z0-9]+$"))
    agency = page.url.rsplit("/", 1)[1]
    await page.goto(f"{stack.url}/#/agencies")
    await expect(page.locator("table.grid")).to_contain_text("Research desk")
    await shot(page, "agencies")

    # Blueprints: a syntax error and a refused field are shown inline, then it saves.
    await page.goto(f"{stack.url}/#/a/{agency}/blueprints/new")
    editor = page.locator("#blueprint-json")
    await editor.fill('{"name": "lead", "tags": ["default"],')
    await expect(page.locator("#blueprint-error")).to_contain_text("Not valid JSON")
    await editor.fill(json.dumps({**LEAD, "tags": "default"}, indent=2))
    await page.click("#save-blueprint")
    await expect(page.locator("#blueprint-error")).to_contain_text("tags")
    await expect(editor).to_have_class(re.compile("invalid"))
    await shot(page, "blueprint-error")
    await editor.fill(json.dumps(LEAD, indent=2))
    await page.click("#save-blueprint")
    await expect(page).to_have_url(re.compile(r"/blueprints/lead$"))
    await expect(page.locator(".bp-list a.on")).to_contain_text("rev 1")
    await shot(page, "blueprints")

    # A thread of the new blueprint, started from the side bar.
    await page.goto(f"{stack.url}/#/a/{agency}")
    await expect(page.locator("#side select[title='blueprint of the new thread']")).to_contain_text(
        "lead"
    )
    await page.select_option("#side select[title='blueprint of the new thread']", "lead")
    await page.click("#new-thread")
    await expect(page).to_have_url(re.compile(r"/t/[A-Za-z0-9]+$"))
    thread = page.url.rsplit("/", 1)[1]
    await expect(page.locator(".thead .title")).to_have_text("lead")

    # The run: todos, then a lookup held for approval; its arguments are edited.
    key = "console-" + thread
    script(stack, key)
    await page.fill("#message", f"Research event sourcing for me ({key})")
    await page.click("#send")
    hitl = page.locator("#hitl")
    await expect(hitl).to_contain_text("lookup")
    await expect(page.locator(".todos")).to_contain_text("Look up the term")
    await expect(page.locator(".thead")).to_contain_text("paused · hitl")
    args = hitl.locator("textarea")
    assert json.loads(await args.input_value()) == {"word": "event sourcing"}
    await args.fill('{"word": "event log"}')
    await shot(page, "hitl")
    await page.click("#hitl-submit")

    # Text streams in, then the run completes; the transcript folds each call with its result.
    await expect(page.locator(".msg.streaming")).to_contain_text("Done", timeout=20_000)
    await expect(page.locator(".thead .badge").first).to_have_text("completed", timeout=20_000)
    transcript = page.locator("#transcript")
    await expect(transcript.locator("h2")).to_have_text("Done")
    lookup = transcript.locator("details.call", has_text="lookup")
    await lookup.locator("summary").click()
    await expect(lookup.locator(".result")).to_contain_text("definition of event log")
    await expect(transcript.locator("details.call", has_text="task")).to_contain_text(
        "source of truth"
    )

    # The tree: the worker nested under the lead, both completed.
    state = await api_get(stack, tenant, f"/agency/{agency}/agent/{thread}/state")
    (link,) = state["state"]["subagents"]
    child = link["childThreadId"]
    child_row = page.locator(f".tnode[data-id='{child}']")
    await expect(child_row).to_contain_text("worker")
    await expect(child_row.locator(".badge")).to_have_text("completed")
    await expect(page.locator(f".tnode[data-id='{thread}'] .badge")).to_have_text("completed")
    assert await child_row.evaluate("n => parseInt(n.style.paddingLeft)") > await page.locator(
        f".tnode[data-id='{thread}']"
    ).evaluate("n => parseInt(n.style.paddingLeft)")
    await shot(page, "chat")

    # Timeline: every event, a payload opened; the whole tree adds the worker's events.
    await page.click("nav.tabs a[data-tab='timeline']")
    timeline = page.locator("#timeline")
    await expect(timeline.locator(".vrow").first).to_be_visible()
    await page.select_option("#tl-type", "type:hitl.resume")
    await expect(timeline.locator(".vrow[data-type='hitl.resume']")).to_have_count(1)
    await timeline.locator(".vrow[data-type='hitl.resume']").click()
    await expect(page.locator("#event-detail")).to_contain_text("event log")
    await expect(page.locator("#event-detail")).to_contain_text("modifiedToolCalls")
    await page.select_option("#tl-type", "nodelta")
    await expect(timeline.locator(".vrow.sel[data-type='hitl.resume']")).to_be_visible()
    await shot(page, "timeline")
    await page.select_option("#tl-scope", "tree")
    await page.select_option("#tl-type", "type:thread.created")
    await expect(timeline.locator(".vrow")).to_have_count(2)
    await expect(timeline.locator(".vrow .who", has_text=child[-8:])).to_be_visible()
    await page.select_option("#tl-type", "fam:tool")
    await expect(timeline.locator(".vrow[data-type='tool.output']").first).to_be_visible()
    types = await timeline.locator(".vrow").evaluate_all("rows => rows.map(r => r.dataset.type)")
    assert types and all(t.startswith("tool.") for t in types), types
    await page.select_option("#tl-type", "nodelta")

    # Graph: the tree as one graph, with the spawn and report edges between threads.
    await page.click("nav.tabs a[data-tab='graph']")
    await page.wait_for_function("window.agencyGraph && window.agencyGraph.nodes().length > 10")
    kinds = await page.evaluate("[...new Set(window.agencyGraph.nodes().map(n => n.data('kind')))]")
    assert {"run", "step", "model", "tool", "hitl", "subagent", "report", "ok"} <= set(kinds), kinds
    edges = await page.evaluate("window.agencyGraph.edges().map(e => e.data('kind'))")
    assert edges.count("spawn") == 1 and edges.count("report") == 1, edges
    await page.click("#fit")
    await shot(page, "graph")
    async with page.expect_download() as svg_download:
        await page.click("#export-svg")
    svg = (await (await svg_download.value).path()).read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and "report ←" in svg
    async with page.expect_download() as png_download:
        await page.click("#export-png")
    png = (await (await png_download.value).path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"

    # Files: markdown rendered, code with line numbers and highlighting.
    await page.click("nav.tabs a[data-tab='files']")
    preview = page.locator("#preview")
    await expect(preview.locator("h1")).to_have_text("Event sourcing, in short")
    await expect(preview.locator("table")).to_contain_text("projections")
    await shot(page, "files")
    await page.click(".files-list a:text('replay.py')")
    await expect(preview.locator("table.code td.ln").last).to_have_text(str(CODE.count("\n") + 1))
    assert await preview.locator("table.code .hljs-keyword").count() > 3
    await shot(page, "files-code")

    # State as JSON, and usage per run and per thread of the tree.
    await page.click("nav.tabs a[data-tab='state']")
    await expect(page.locator(".json")).to_contain_text('"pendingToolCalls"')
    await shot(page, "state")
    await page.click("nav.tabs a[data-tab='usage']")
    await expect(page.locator("#usage-runs tr")).to_have_count(3)  # header, the run, total
    await expect(page.locator("#usage-tree")).to_contain_text("worker")
    await shot(page, "usage")

    # Replay: re-executed with the newer code, the worker now holds its file write.
    await page.click("nav.tabs a[data-tab='replay']")
    await page.click("#reexecute")
    report = page.locator("#replay-report")
    await expect(report.locator(".replay-thread")).to_have_count(2, timeout=30_000)
    await expect(report.locator(".replay-thread").first).to_contain_text("same")
    diverged = report.locator(".replay-thread").nth(1)
    await expect(diverged).to_contain_text("diverged at event")
    await expect(diverged.locator(".diverge").nth(2)).to_contain_text("hitl.interrupt")
    await shot(page, "replay")

    # Fork from a timeline row: a new thread with the history up to that event.
    await page.click("nav.tabs a[data-tab='timeline']")
    row = timeline.locator(".vrow[data-type='hitl.interrupt']")
    at_seq = int(await row.get_attribute("data-seq") or 0)
    await row.hover()
    await row.locator("button.fork").click()
    await expect(page).not_to_have_url(re.compile(f"/t/{thread}"))
    fork = re.search(r"/t/([A-Za-z0-9]+)", page.url)
    assert fork is not None and fork.group(1) != thread
    await expect(page.locator(".thead .title")).to_have_text("lead")
    await expect(page.locator("#transcript")).to_contain_text("Research event sourcing")
    await expect(page.locator(f".tnode[data-id='{fork.group(1)}']")).to_be_visible()
    forked = await api_get(
        stack, tenant, f"/agency/{agency}/agent/{fork.group(1)}/events?limit=1000"
    )
    assert len(forked["events"]) >= at_seq
    await shot(page, "fork")
