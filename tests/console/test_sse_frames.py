"""A browser's own EventSource on a thread's stream: every event arrives once, by
`onmessage` (the default), or by per-type listeners with `named=true`."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Page

from agency.contracts.codec import EVENT_TYPES
from agency.contracts.ids import new_id
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.console.conftest import Stack, Tenant
from tests.console.test_scale import agency_of
from tests.helpers import assert_eventually

# Opens an EventSource, listens with `onmessage` and with a listener per event type, and
# answers every (listener, id) it got once `until` arrived by the listener expected.
LISTEN = """async ({url, types, until, named}) => {
  const got = [];
  const source = new EventSource(url);
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no event ${until} in 15 s: ${JSON.stringify(got)}`)), 15000);
    const record = (kind) => (m) => {
      got.push([kind, Number(m.lastEventId), JSON.parse(m.data).seq]);
      if (Number(m.lastEventId) === until && (kind === "message") !== named) {
        clearTimeout(timer);
        resolve();
      }
    };
    source.onmessage = record("message");
    for (const type of types) source.addEventListener(type, record("typed"));
  });
  source.close();
  return got;
}"""


async def completed_thread(stack: Stack, tenant: Tenant) -> tuple[str, int]:
    """A thread with one finished run: its stream path and its last seq."""
    agency = await agency_of(stack, tenant)
    key = "frames-" + new_id()
    todo = ScriptToolCall(
        name="write_todos", arguments={"todos": [{"content": "x", "status": "pending"}]}
    )
    stack.llm.script(key, [ScriptStep(tool_calls=(todo,)), ScriptStep(content="done")])
    async with tenant.http(stack) as http:
        r = await http.post(f"/agency/{agency}/agents", json={"agentType": "worker"})
        thread = r.json()["id"]
        r = await http.post(
            f"/agency/{agency}/agent/{thread}/invoke",
            json={"messages": [{"role": "user", "content": key}]},
        )
        assert r.status_code == 202, r.text

        async def finished() -> int:
            view = (await http.get(f"/agency/{agency}/agent/{thread}")).json()
            assert view["status"] == "completed", view
            last: int = view["lastSeq"]
            return last

        last_seq = await assert_eventually(finished, timeout=30)
    return f"{stack.url}/agency/{agency}/agent/{thread}/stream", last_seq


async def listen(page: Page, url: str, until: int, *, named: bool) -> list[Any]:
    arguments = {"url": url, "types": sorted(EVENT_TYPES), "until": until, "named": named}
    got: list[Any] = await page.evaluate(LISTEN, arguments)
    return got


async def test_a_browser_event_source_gets_each_event_once(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    stream, last_seq = await completed_thread(stack, tenant)
    got = await listen(page, f"{stream}?access_token={tenant.key}", last_seq, named=False)
    # Every event once, by onmessage, in order; no per-type listener fired.
    assert got == [["message", seq, seq] for seq in range(1, last_seq + 1)], got


async def test_named_frames_reach_per_type_listeners_once_on_request(
    page: Page, stack: Stack, tenant: Tenant
) -> None:
    stream, last_seq = await completed_thread(stack, tenant)
    url = f"{stream}?access_token={tenant.key}&named=true"
    got = await listen(page, url, last_seq, named=True)
    assert got == [["typed", seq, seq] for seq in range(1, last_seq + 1)], got
