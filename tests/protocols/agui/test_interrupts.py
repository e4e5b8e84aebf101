"""Approvals as AG-UI interrupts: a run that holds tool calls finishes with an interrupt
outcome, and the next run answers it with `resume` (approve, reject, edited arguments)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.protocols.agui.conftest import Tenant, frames, text_of, types


def _lookup(*words: str) -> ScriptStep:
    return ScriptStep(
        tool_calls=tuple(ScriptToolCall(name="lookup", arguments={"word": w}) for w in words)
    )


def _held(turn: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The one interrupt a turn ended with, and the id of the call it holds."""
    events = turn["events"]
    assert types(events)[-1] == "RUN_FINISHED"
    outcome = events[-1]["outcome"]
    assert outcome["type"] == "interrupt"
    (interrupt,) = outcome["interrupts"]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"] == start["toolCallId"]
    assert "TOOL_CALL_RESULT" not in types(events)
    return interrupt, start["toolCallId"]


async def test_an_approved_interrupt_runs_the_call_in_the_next_run(tenant: Tenant) -> None:
    key = f"agui-approve-{tenant.agency}"
    tenant.llm.script(key, [_lookup("fig"), ScriptStep(content="looked it up")])
    got = await tenant.client("approver", [{"user": f"{key}: fig?"}, {"resume": "approve"}])
    first, second = got["turns"]
    interrupt, call_id = _held(first)
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert first["outcome"]["outcome"] == "interrupt"
    events = second["events"]
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert "TOOL_CALL_START" not in kinds  # the call was proposed in the run before
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == call_id and result["content"] == "definition of fig"
    assert text_of(events) == "looked it up"
    assert events[-1]["outcome"] == {"type": "success"}
    assert [m["role"] for m in got["messages"]] == ["user", "assistant", "tool", "assistant"]


async def test_a_rejected_interrupt_answers_the_call_without_running_it(tenant: Tenant) -> None:
    key = f"agui-reject-{tenant.agency}"
    tenant.llm.script(key, [_lookup("fig"), ScriptStep(content="did without it")])
    got = await tenant.client("approver", [{"user": f"{key}: fig?"}, {"resume": "reject"}])
    first, second = got["turns"]
    _, call_id = _held(first)
    (result,) = [e for e in second["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == call_id
    assert "definition" not in result["content"]
    assert text_of(second["events"]) == "did without it"
    assert second["events"][-1]["outcome"] == {"type": "success"}


async def test_an_approval_with_edited_arguments_runs_the_edited_call(tenant: Tenant) -> None:
    key = f"agui-edit-{tenant.agency}"
    tenant.llm.script(key, [_lookup("fig"), ScriptStep(content="edited")])
    got = await tenant.client(
        "approver", [{"user": f"{key}: fig?"}, {"resume": "approve", "edit": {"word": "date"}}]
    )
    (result,) = [e for e in got["turns"][1]["events"] if e["type"] == "TOOL_CALL_RESULT"]
    assert result["content"] == "definition of date"


def _input(thread: str, run: str, **extra: Any) -> dict[str, Any]:
    text = {"id": str(uuid.uuid4()), "role": "user", "content": "and now?"}
    return {"threadId": thread, "runId": run, "messages": [text], **extra}


async def test_new_input_while_an_interrupt_is_open_is_a_run_error(tenant: Tenant) -> None:
    key = f"agui-pending-{tenant.agency}"
    tenant.llm.script(key, [_lookup("fig", "date"), ScriptStep(content="both")])
    thread = str(uuid.uuid4())
    got = await tenant.client("approver", [{"user": f"{key}: fig?"}], thread=thread)
    interrupts = got["turns"][0]["events"][-1]["outcome"]["interrupts"]
    assert len(interrupts) == 2

    refused = await tenant.post("approver", _input(thread, "r-new"))
    assert refused.status_code == 200
    events = frames(refused.text)
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[1]["code"] == "interrupts_pending"
    assert interrupts[0]["id"] in events[1]["message"]

    partial = [{"interruptId": interrupts[0]["id"], "status": "resolved", "payload": True}]
    half = frames((await tenant.post("approver", _input(thread, "r-half", resume=partial))).text)
    assert types(half) == ["RUN_STARTED", "RUN_ERROR"]
    assert half[1]["code"] == "interrupts_unanswered"

    mixed = [
        {"interruptId": interrupts[0]["id"], "status": "resolved", "payload": {"approved": True}},
        {"interruptId": interrupts[1]["id"], "status": "cancelled"},
    ]
    both = frames((await tenant.post("approver", _input(thread, "r-mix", resume=mixed))).text)
    assert both[-1]["type"] == "RUN_ERROR" and both[-1]["code"] == "mixed_decisions"

    stranger = [{"interruptId": "nope", "status": "cancelled"}]
    unknown = frames((await tenant.post("approver", _input(thread, "r-x", resume=stranger))).text)
    assert unknown[-1]["type"] == "RUN_ERROR" and unknown[-1]["code"] == "unknown_interrupt"

    # Still open: the refusals decided nothing, and both calls can still be approved.
    approved = [{"interruptId": i["id"], "status": "resolved", "payload": True} for i in interrupts]
    done = frames((await tenant.post("approver", _input(thread, "r-ok", resume=approved))).text)
    assert types(done)[-1] == "RUN_FINISHED" and text_of(done) == "both"
    results = [e["content"] for e in done if e["type"] == "TOOL_CALL_RESULT"]
    assert sorted(results) == ["definition of date", "definition of fig"]


async def test_a_resume_on_a_thread_without_interrupts_is_a_run_error(tenant: Tenant) -> None:
    key = f"agui-noint-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="plain")])
    thread = str(uuid.uuid4())
    await tenant.client("approver", [{"user": f"{key}: hi"}], thread=thread)
    resume = [{"interruptId": "x", "status": "cancelled"}]
    events = frames((await tenant.post("approver", _input(thread, "r2", resume=resume))).text)
    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    assert events[1]["code"] == "no_open_interrupt"


async def test_another_tenants_thread_is_not_found(tenant: Tenant, other: Tenant) -> None:
    key = f"agui-tenant-{tenant.agency}"
    tenant.llm.script(key, [_lookup("fig"), ScriptStep(content="mine")])
    thread = str(uuid.uuid4())
    got = await tenant.client("approver", [{"user": f"{key}: secret fig"}], thread=thread)
    (interrupt,) = got["turns"][0]["events"][-1]["outcome"]["interrupts"]

    # Its interrupt cannot be answered from another tenant: there is no such thread there.
    resume = [{"interruptId": interrupt["id"], "status": "resolved", "payload": True}]
    answer = await other.post("approver", _input(thread, "r-steal", resume=resume))
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == f"thread {thread} not found"
    # The AG-UI client sees the same.
    (stolen,) = (await other.client("approver", [{"resume": resume}], thread=thread))["turns"]
    assert stolen["error"]["status"] == 404 and "not found" in stolen["error"]["message"]
    assert stolen["events"] == []
    # Another tenant's agency is not found either.
    body = _input(str(uuid.uuid4()), "r")
    async with httpx.AsyncClient(timeout=30) as http:
        foreign = await http.post(
            other.route("approver", agency=tenant.agency),
            json=body,
            headers={"Authorization": f"Bearer {other.key}"},
        )
    assert foreign.status_code == 404 and tenant.agency in foreign.json()["error"]
    # New input on the same id is a thread of the other tenant's own: none of this one's.
    other.llm.script(f"agui-other-{other.agency}", [ScriptStep(content="yours")])
    theirs = await other.client(
        "approver", [{"user": f"agui-other-{other.agency}: hi"}], thread=thread
    )
    assert "secret fig" not in str(theirs)
    assert [m["role"] for m in theirs["messages"]] == ["user", "assistant"]
    # And the first tenant's interrupt is still open, untouched.
    still = frames((await tenant.post("approver", _input(thread, "r-again"))).text)
    assert still[-1]["code"] == "interrupts_pending"
