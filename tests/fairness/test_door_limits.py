"""Requests refused at the door, with the limit named: a blueprint's prompt at save, an
invoke's messages (count and size) over HTTP, LangGraph's runs and NATS commands. A
refused request is never stored as accepted, so it never harms the run it would have
joined."""

from __future__ import annotations

import pytest

from agency.contracts.commands import InvokeThread, SaveBlueprint
from agency.contracts.events import (
    BlueprintSpec,
    ChatMessage,
    RequestAccepted,
    RequestRejected,
    RunCompleted,
)
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.contracts.ids import new_id
from agency.infra.jetstream import dlq_admin
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.tenancy.door_limits import (
    MESSAGES_LIMIT,
    MESSAGES_SIZE_LIMIT,
    PROMPT_LIMIT,
    DoorLimits,
)
from tests.fairness.conftest import Tenant
from tests.helpers import assert_eventually

LIMITS = DoorLimits()  # the documented defaults the system runs with
# A guard against a hang, not a measured duration (a refused request once delayed the next
# run by 60 s).
HANG_GUARD = 30.0


def _messages(count: int, size: int = 1) -> list[dict[str, str]]:
    return [{"role": "user", "content": "x" * size} for _ in range(count)]


async def test_a_prompt_over_the_limit_is_refused_at_save_naming_the_limit(
    tenant: Tenant,
) -> None:
    path = f"/agency/{tenant.agency}/blueprints"
    big = {"name": "big", "prompt": "p" * (LIMITS.max_prompt_bytes + 1), "tags": ["default"]}
    r = await tenant.http.post(path, json=big)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert PROMPT_LIMIT in error and str(LIMITS.max_prompt_bytes) in error, error
    assert "AGENCY_MAX_PROMPT_BYTES" in error
    assert (await tenant.http.get(f"{path}/big")).status_code == 404
    at_limit = {**big, "name": "fits", "prompt": "p" * LIMITS.max_prompt_bytes}
    r = await tenant.http.post(path, json=at_limit)
    assert r.status_code in (201, 202), r.text


async def test_a_prompt_over_the_limit_saved_over_nats_is_refused_with_the_reason(
    tenant: Tenant,
) -> None:
    name = "nats" + new_id().lower()[-8:]
    spec = BlueprintSpec(name=name, prompt="p" * (LIMITS.max_prompt_bytes + 1))
    await tenant.bus.commands.send(
        tenant.id, SaveBlueprint(agency_id=tenant.agency, blueprint=spec), idempotency_key=name
    )

    async def refused() -> dlq_admin.LetterInfo:
        letters = await dlq_admin.list_letters(
            tenant.bus.js, tenant=tenant.id, reason="invalid_blueprint", limit=200
        )
        mine = [letter for letter in letters if name in letter.detail]
        assert mine, letters
        return mine[-1]

    letter = await assert_eventually(refused, timeout=20)
    assert PROMPT_LIMIT in letter.detail and str(LIMITS.max_prompt_bytes) in letter.detail
    r = await tenant.http.get(f"/agency/{tenant.agency}/blueprints/{name}")
    assert r.status_code == 404, r.text


async def test_too_many_or_too_large_messages_answer_400_over_http(tenant: Tenant) -> None:
    thread = await tenant.thread()
    url = f"{tenant.path(thread)}/invoke"
    r = await tenant.http.post(url, json={"messages": _messages(LIMITS.max_invoke_messages + 1)})
    assert r.status_code == 400, r.text
    assert MESSAGES_LIMIT in r.json()["error"] and "AGENCY_MAX_INVOKE_MESSAGES" in r.json()["error"]
    big = _messages(2, LIMITS.max_invoke_bytes // 2 + 1)
    r = await tenant.http.post(url, json={"messages": big})
    assert r.status_code == 400, r.text
    assert MESSAGES_SIZE_LIMIT in r.json()["error"]
    assert str(LIMITS.max_invoke_bytes) in r.json()["error"]
    # Nothing of them reached the thread.
    assert not [e for e in await tenant.events(thread) if isinstance(e.payload, RequestAccepted)]


async def test_too_many_messages_in_a_langgraph_run_answer_4xx(tenant: Tenant) -> None:
    r = await tenant.http.post("/langgraph/threads", json={})
    assert r.status_code == 200, r.text
    thread = r.json()["thread_id"]
    body = {
        "assistant_id": "worker",
        "input": {"messages": _messages(LIMITS.max_invoke_messages + 1)},
    }
    r = await tenant.http.post(f"/langgraph/threads/{thread}/runs", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert MESSAGES_LIMIT in r.text
    r = await tenant.http.post("/langgraph/runs/wait", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert MESSAGES_LIMIT in r.text


async def test_a_queued_oversized_request_is_rejected_and_leaves_the_active_run_whole(
    tenant: Tenant,
) -> None:
    """The active run is held inside a model call while an oversized request is queued
    behind it on the bus and over HTTP: the request is refused at once with the reason,
    the active run completes, and the next request runs at once."""
    key = "held-" + new_id().lower()
    tenant.llm.script(key, [ScriptStep(content="held answer")])
    release = tenant.llm.hold(key)
    thread = await tenant.thread()
    r = await tenant.invoke(thread, key)
    assert r.status_code == 202, r.text
    active_run = r.json()["runId"]
    await tenant.wait_for(thread, lambda es: any(e.type == "model.started" for e in es))

    oversized = "run_" + new_id()
    await tenant.bus.commands.send(
        tenant.id,
        InvokeThread(
            agency_id=tenant.agency,
            thread_id=thread,
            run_id=oversized,
            messages=tuple(ChatMessage(role="user", content="m") for _ in range(10_000)),
            strategy="queue",
        ),
    )
    r = await tenant.invoke(thread, "y" * (LIMITS.max_invoke_bytes + 1))
    assert r.status_code == 400, r.text

    def rejected(events: list[RecordedEvent]) -> bool:
        return any(isinstance(e.payload, RequestRejected) for e in events)

    events = await tenant.wait_for(thread, rejected, timeout=HANG_GUARD)
    refusal = next(e.payload for e in events if isinstance(e.payload, RequestRejected))
    assert refusal.run_id == oversized and refusal.reason.startswith(MESSAGES_LIMIT)
    assert "10000 messages" in refusal.reason
    release.set()

    events = await tenant.wait_terminal(thread, timeout=HANG_GUARD)
    completed = [e.payload for e in events if isinstance(e.payload, RunCompleted)]
    assert [c.run_id for c in completed] == [active_run], [e.type for e in events]
    assert not any(e.type == "run.error" for e in events)
    accepted = [e.payload.run_id for e in events if isinstance(e.payload, RequestAccepted)]
    assert oversized not in accepted

    # The next request runs at once: its wait is bounded well below the 60 s delay a
    # refused request once caused.
    r = await tenant.invoke(thread, "next")
    assert r.status_code == 202, r.text
    events = await tenant.wait_terminal(thread, count=2, timeout=HANG_GUARD)
    terminal = [e.type for e in events if e.type in RUN_TERMINAL_TYPES]
    assert terminal == ["run.completed", "run.completed"]


def test_a_message_limit_no_run_could_start_with_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENCY_MAX_INVOKE_MESSAGES", "999")
    with pytest.raises(ValueError, match="AGENCY_MAX_INVOKE_MESSAGES is 999: it must be 1 to 500"):
        DoorLimits.from_env()
