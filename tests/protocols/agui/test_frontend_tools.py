"""Frontend tools: the `tools` of a `RunAgentInput` are offered to the model; a call of one
ends the run with the call pending, and the client's next run answers it."""

from __future__ import annotations

import uuid

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.protocols.agui.conftest import Tenant, frames, text_of, types

CONFIRM = {
    "name": "confirm",
    "description": "Ask the user to confirm something",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
}


def _asks(key: str, then: str) -> list[ScriptStep]:
    call = ScriptToolCall(name="confirm", arguments={"question": "go on?"})
    return [ScriptStep(tool_calls=(call,)), ScriptStep(content=then)]


async def test_a_frontend_tool_call_is_answered_by_the_client_s_next_run(tenant: Tenant) -> None:
    key = f"agui-front-{tenant.agency}"
    tenant.llm.script(key, _asks(key, "the user said yes"))
    got = await tenant.client(
        "worker",
        [{"user": f"{key}: ask me", "tools": [CONFIRM]}, {"answer": "yes", "tools": [CONFIRM]}],
    )
    first, second = got["turns"]
    events = first["events"]
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "confirm"
    assert "TOOL_CALL_RESULT" not in types(events)
    assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [start["toolCallId"]]}
    assert first["outcome"]["pendingToolCallIds"] == [start["toolCallId"]]
    # The model was offered the tool as the client described it.
    asked = next(r for r in tenant.llm.requests if key in str(r))
    offered = {t["function"]["name"]: t["function"] for t in asked["tools"]}
    assert offered["confirm"]["parameters"] == CONFIRM["parameters"]

    assert second["error"] is None and text_of(second["events"]) == "the user said yes"
    answered = next(r for r in reversed(tenant.llm.requests) if key in str(r))
    tool = answered["messages"][-1]
    assert tool["role"] == "tool" and tool["content"] == "yes"
    assert tool["tool_call_id"] == start["toolCallId"]
    roles = [m["role"] for m in got["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_new_input_past_an_unanswered_call_answers_it_as_not_answered(
    tenant: Tenant,
) -> None:
    key = f"agui-skip-{tenant.agency}"
    tenant.llm.script(key, _asks(key, "unused"))
    thread = str(uuid.uuid4())
    await tenant.client("worker", [{"user": f"{key}: ask me", "tools": [CONFIRM]}], thread=thread)
    text = {"id": str(uuid.uuid4()), "role": "user", "content": f"{key}: never mind"}
    body = {"threadId": thread, "runId": "r2", "messages": [text]}
    events = frames((await tenant.post("worker", body)).text)
    assert types(events)[-1] == "RUN_FINISHED", events
    (snapshot,) = [e for e in events if e["type"] == "MESSAGES_SNAPSHOT"]
    tool = next(m for m in snapshot["messages"] if m["role"] == "tool")
    assert tool["content"] == "The client did not answer this call."


async def test_a_frontend_tool_that_cannot_be_offered_is_a_400(tenant: Tenant) -> None:
    thread = str(uuid.uuid4())
    bad = {**CONFIRM, "name": "not a name"}
    answer = await tenant.post("worker", {"threadId": thread, "runId": "r", "tools": [bad]})
    assert answer.status_code == 400 and "tool name" in answer.json()["error"]
