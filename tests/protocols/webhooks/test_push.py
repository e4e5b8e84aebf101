"""A2A push notifications are made from the log: a task's changes written while the
webhooks service was away are all delivered once it is back."""

from __future__ import annotations

from typing import Any

from a2a.types import TaskState

from agency.services.llm.fake_scripts import ScriptStep
from tests.protocols.a2a.receiver import Pushed, receiving
from tests.protocols.webhooks.conftest import Agency


def _send(key: str, url: str) -> dict[str, Any]:
    """A blocking SendMessage with a push config, as JSON-RPC."""
    config = {
        "url": url,
        "token": "tok",
        "authentication": {"scheme": "Bearer", "credentials": "c"},
    }
    params = {
        "message": {"messageId": key, "role": "ROLE_USER", "parts": [{"text": key}]},
        "configuration": {"taskPushNotificationConfig": config},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


def _states(pushed: list[Pushed]) -> list[int]:
    return [p.event.status_update.status.state for p in pushed if p.event.HasField("status_update")]


async def test_a_tasks_changes_made_while_the_service_was_away_are_pushed_on_its_return(
    agency: Agency,
) -> None:
    await agency.hooks.stop()
    key = f"push-away-{agency.agency}"
    agency.llm.script(key, [ScriptStep(content="done while away")])
    async with receiving() as receiver:
        r = await agency.http.post(f"/a2a/{agency.agency}/worker", json=_send(key, receiver.url))
        task = r.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", r.text
        assert not receiver.requests
        agency.hooks.start()
        pushed = await receiver.until(
            lambda got: (
                TaskState.TASK_STATE_COMPLETED in _states(got)
                and TaskState.TASK_STATE_SUBMITTED in _states(got)
                and TaskState.TASK_STATE_WORKING in _states(got)
            )
        )
    assert {p.event.status_update.task_id for p in pushed if p.event.HasField("status_update")} == {
        task["id"]
    }
    assert all(p.headers["authorization"] == "Bearer c" for p in pushed)
