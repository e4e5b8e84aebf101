"""`POST …/terminate` over HTTP: the run under way ends canceled (reason `terminated`),
`/state` shows the thread terminated, and a later invoke is a 409 saying why."""

from __future__ import annotations

from typing import Any

from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually


async def test_terminate_mid_step_then_invoke_is_refused(client: Client) -> None:
    key = "http-terminate-" + client.agency
    client.llm.script(key, [ScriptStep(content="never shown", delay_ms=30_000)])
    thread = await client.thread()
    run_id = await client.invoke(thread, key)

    async def step_under_way() -> None:
        r = await client.http.get(f"{client.path(thread)}/events", params={"type": "model.started"})
        assert r.json()["events"], "the model call has not started yet"

    await assert_eventually(step_under_way, timeout=15)
    r = await client.http.post(f"{client.path(thread)}/terminate", json={"reason": "shutting down"})
    assert r.status_code == 202, r.text
    assert r.json() == {"threadId": thread, "status": "terminating"}

    def terminated(state: dict[str, Any]) -> bool:
        return state["state"]["thread"]["status"] == "terminated"

    state = await client.until(thread, terminated, timeout=10)
    assert state["run"] == {
        "runId": run_id,
        "status": "canceled",
        "step": 1,
        "reason": "terminated",
    }
    listed = (await client.http.get(f"/agency/{client.agency}/agents")).json()
    assert next(t for t in listed if t["id"] == thread)["status"] == "terminated"

    refused = await client.http.post(
        f"{client.path(thread)}/invoke", json={"messages": [{"role": "user", "content": "hi"}]}
    )
    assert refused.status_code == 409
    assert refused.json()["error"] == (
        f"thread {thread} is terminated (shutting down): it takes no new runs or messages"
    )
    again = await client.http.post(f"{client.path(thread)}/terminate")
    assert again.status_code == 202 and again.json()["status"] == "terminated"
