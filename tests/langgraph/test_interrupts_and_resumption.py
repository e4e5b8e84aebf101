"""Approvals as LangGraph interrupts resumed with `command: {resume}`, and streams resumed
with `Last-Event-ID`, through the official LangGraph SDK client."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from langgraph_sdk.errors import BadRequestError, ConflictError

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import WAIT, ask, call, collect


async def _approver(lg: LangGraph, name: str, answer: str) -> tuple[str, str]:
    key = f"lg-{name}-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="w")]),
            ScriptStep(content=answer),
        ],
    )
    thread = await lg.client.threads.create(graph_id="approver")
    return str(thread["thread_id"]), key


async def test_an_approval_is_an_interrupt_resumed_with_a_command(lg: LangGraph) -> None:
    thread, key = await _approver(lg, "hitl", "looked it up")
    paused = await lg.client.runs.wait(thread, "approver", input=ask(key))
    assert isinstance(paused, dict)
    (interrupt,) = paused["__interrupt__"]
    (request,) = interrupt["value"]["action_requests"]
    assert request["name"] == "lookup" and request["args"] == {"word": "w"}

    got = await lg.client.threads.get(thread)
    assert got["status"] == "interrupted"
    assert got["interrupts"] == {interrupt["id"]: [interrupt]}
    state = await lg.client.threads.get_state(thread)
    assert state["next"] == ["tools"] and state["interrupts"] == [interrupt]
    assert state["tasks"][0]["interrupts"] == [interrupt]
    waiting = await lg.client.threads.search(status="interrupted")
    assert [t["thread_id"] for t in waiting] == [thread]

    resumed = await lg.client.runs.wait(
        thread, "approver", command={"resume": {"decisions": [{"type": "approve"}]}}
    )
    assert isinstance(resumed, dict) and "__interrupt__" not in resumed
    assert [m["type"] for m in resumed["messages"]] == ["human", "ai", "tool", "ai"]
    assert resumed["messages"][-1]["content"] == "looked it up"
    assert (await lg.client.threads.get(thread))["status"] == "idle"
    # `runs.wait` raises httpx's own error (the SDK reads its answer as a stream).
    with pytest.raises(httpx.HTTPStatusError) as nothing:
        await lg.client.runs.wait(thread, "approver", command={"resume": True})
    assert nothing.value.response.status_code == 409
    with pytest.raises(ConflictError, match="no interrupt"):
        await lg.client.runs.create(thread, "approver", command={"resume": True})


async def test_a_streamed_interrupt_is_rejected_by_a_resumed_stream(lg: LangGraph) -> None:
    thread, key = await _approver(lg, "hitl-reject", "did without it")
    parts = await collect(
        lg.client.runs.stream(thread, "approver", input=ask(key), stream_mode=["updates", "values"])
    )
    updates = [p.data for p in parts if p.event == "updates"]
    assert "__interrupt__" in updates[-1]
    assert "__interrupt__" in [p.data for p in parts if p.event == "values"][-1]
    interrupt_id = updates[-1]["__interrupt__"][0]["id"]

    with pytest.raises(BadRequestError, match="approve, edit or reject"):
        await lg.client.runs.create(thread, "approver", command={"resume": "maybe"})
    resumed = await collect(
        lg.client.runs.stream(
            thread,
            "approver",
            command={"resume": {interrupt_id: "reject"}},
            stream_mode="updates",
        )
    )
    assert resumed[0].event == "metadata" and "~" in resumed[0].data["run_id"]
    tool, answer = [p.data for p in resumed if p.event == "updates"]
    assert "rejected" in tool["tools"]["messages"][0]["content"]
    assert answer["model"]["messages"][0]["content"] == "did without it"
    run = await lg.client.runs.get(thread, resumed[0].data["run_id"])
    assert run["status"] == "success"


async def test_an_edit_decision_runs_the_edited_call(lg: LangGraph) -> None:
    thread, key = await _approver(lg, "hitl-edit", "edited and done")
    await lg.client.runs.wait(thread, "approver", input=ask(key))
    edit = {"type": "edit", "edited_action": {"name": "lookup", "args": {"word": "edited"}}}
    run = await lg.client.runs.create(thread, "approver", command={"resume": {"decisions": [edit]}})
    final = await lg.client.runs.join(thread, run["run_id"])
    tool = next(m for m in final["messages"] if m["type"] == "tool")
    assert "edited" in tool["content"]
    assert final["messages"][-1]["content"] == "edited and done"


async def test_last_event_id_resumes_a_cut_stream(lg: LangGraph) -> None:
    key = "lg-resume-" + lg.agency
    text = "a fairly long answer streamed in many small chunks to be cut"
    lg.llm.script(key, [ScriptStep(content=text, stream_delay_ms=60)])
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    modes = ["messages-tuple", "values"]
    stream = lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode=modes)
    head = []
    async with asyncio.timeout(WAIT):
        async for part in stream:
            head.append(part)
            if part.event == "messages":
                break  # the client goes away mid-run
    await stream.aclose()
    run_id, last_id = head[0].data["run_id"], head[-1].id
    assert last_id is not None

    rest = await collect(
        lg.client.runs.join_stream(thread, run_id, last_event_id=last_id, stream_mode=modes)
    )
    assert rest[0].event == "metadata"
    assert all(int(p.id) > int(last_id) for p in rest[1:])
    full = await collect(lg.client.runs.join_stream(thread, run_id, stream_mode=modes))
    assert [(p.event, p.data, p.id) for p in head[1:] + rest[1:]] == [
        (p.event, p.data, p.id) for p in full[1:] if int(p.id) <= int(last_id)
    ] + [(p.event, p.data, p.id) for p in rest[1:]]
    chunks = "".join(p.data[0]["content"] for p in head + rest if p.event == "messages")
    assert chunks == text
    assert rest[-1].event == "values" and rest[-1].data["messages"][-1]["content"] == text
