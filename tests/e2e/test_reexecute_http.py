"""The console's re-execution over HTTP with every service as `agency up` runs it: the API
asks the runtime on the bus, each connected as its own NATS user."""

from __future__ import annotations

from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.e2e.test_http_runs import done


async def test_the_runtime_re_executes_a_thread_the_api_asks_for(client: Client) -> None:
    key = "http-reexecute-" + client.agency
    client.llm.script(key, [ScriptStep(content="recorded once")])
    thread = await client.thread()
    await client.invoke(thread, key)
    await client.until(thread, done)

    r = await client.http.post(f"{client.path(thread)}/reexecute", json={})
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["same"] is True and report["compared"] > 5
    (one,) = report["threads"]
    assert one["threadId"] == thread and one["depth"] == 0 and one["parentId"] is None
    assert one["recorded"][-1]["event"]["threadId"] == thread
    assert [e["type"] for e in one["recorded"]] == [e["type"] for e in one["reexecuted"]]
