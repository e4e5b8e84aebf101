"""AG-UI runs through `@ag-ui/client`'s HttpAgent: text, tool calls and their results,
the thread's state and messages, and inputs that are refused before the run."""

from __future__ import annotations

import uuid

import httpx

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.protocols.agui.conftest import Tenant, frames, text_of, types


async def test_a_text_answer_streams_as_one_text_message(tenant: Tenant) -> None:
    key = f"agui-text-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="hello from the agent", stream_delay_ms=20)])
    got = await tenant.client("worker", [{"user": f"{key}: say hello"}])
    (turn,) = got["turns"]
    assert turn["error"] is None
    events = turn["events"]
    kinds = types(events)
    assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED"
    assert kinds.count("RUN_FINISHED") == 1 and "RUN_ERROR" not in kinds
    assert kinds.index("TEXT_MESSAGE_START") < kinds.index("TEXT_MESSAGE_CONTENT")
    assert kinds.index("TEXT_MESSAGE_END") < kinds.index("MESSAGES_SNAPSHOT")
    assert text_of(events) == "hello from the agent"
    assert events[-1]["outcome"] == {"type": "success"}
    assert turn["outcome"]["outcome"] == "success"
    assert [(m["role"], m["content"]) for m in got["messages"]] == [
        ("user", f"{key}: say hello"),
        ("assistant", "hello from the agent"),
    ]
    assert got["state"] == {"todos": [], "files": {}}


async def test_a_second_run_of_the_thread_continues_its_conversation(tenant: Tenant) -> None:
    key = f"agui-twice-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="first"), ScriptStep(content="second")])
    thread = str(uuid.uuid4())
    got = await tenant.client(
        "worker", [{"user": f"{key}: one"}, {"user": f"{key}: two"}], thread=thread
    )
    assert [text_of(t["events"]) for t in got["turns"]] == ["first", "second"]
    # The model saw the thread's whole history, once: not the client's copy appended again.
    last = next(r for r in reversed(tenant.llm.requests) if key in str(r))
    users = [m["content"] for m in last["messages"] if m["role"] == "user"]
    assert users == [f"{key}: one", f"{key}: two"]
    roles = [m["role"] for m in got["messages"]]
    assert roles == ["user", "assistant", "user", "assistant"]


async def test_a_tool_call_streams_with_its_result(tenant: Tenant) -> None:
    key = f"agui-tool-{tenant.agency}"
    tenant.llm.script(
        key,
        [
            ScriptStep(tool_calls=(ScriptToolCall(name="lookup", arguments={"word": "kiwi"}),)),
            ScriptStep(content="a kiwi is a fruit"),
        ],
    )
    got = await tenant.client("worker", [{"user": f"{key}: what is a kiwi?"}])
    events = got["turns"][0]["events"]
    kinds = types(events)
    start = next(e for e in events if e["type"] == "TOOL_CALL_START")
    assert start["toolCallName"] == "lookup"
    call_id = start["toolCallId"]
    args = "".join(e["delta"] for e in events if e["type"] == "TOOL_CALL_ARGS")
    assert args == '{"word": "kiwi"}' or args.replace(" ", "") == '{"word":"kiwi"}'
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == call_id
    assert result["content"] == "definition of kiwi"
    assert kinds.index("TOOL_CALL_END") < kinds.index("TOOL_CALL_RESULT")
    assert kinds.index("TOOL_CALL_RESULT") < kinds.index("TEXT_MESSAGE_START")
    assert text_of(events) == "a kiwi is a fruit" and kinds[-1] == "RUN_FINISHED"
    roles = [m["role"] for m in got["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert got["messages"][1]["toolCalls"][0]["id"] == call_id
    assert got["messages"][2] == {
        "id": result["messageId"], "role": "tool", "content": "definition of kiwi",
        "toolCallId": call_id,
    }  # fmt: skip


async def test_todos_and_files_arrive_as_state_snapshots(tenant: Tenant) -> None:
    key = f"agui-state-{tenant.agency}"
    todos = {"todos": [{"content": "buy kiwis", "status": "pending"}]}
    note = {"path": "/notes.md", "content": "kiwis"}
    tenant.llm.script(
        key,
        [
            ScriptStep(
                tool_calls=(
                    ScriptToolCall(name="write_todos", arguments=todos),
                    ScriptToolCall(name="write_file", arguments=note),
                )
            ),
            ScriptStep(content="planned"),
        ],
    )
    got = await tenant.client("worker", [{"user": f"{key}: plan"}])
    events = got["turns"][0]["events"]
    snapshots = [e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT"]
    assert len(snapshots) >= 2
    final = {
        "todos": [{"content": "buy kiwis", "status": "pending"}],
        "files": {"/notes.md": "kiwis"},
    }
    assert snapshots[-1] == final and got["state"] == final


async def test_bad_input_is_refused_with_a_clear_4xx(tenant: Tenant) -> None:
    thread = str(uuid.uuid4())
    no_thread = await tenant.post("worker", {"runId": "r1", "messages": []})
    assert no_thread.status_code == 400, no_thread.text
    assert "threadId" in no_thread.json()["error"]
    wrong_type = await tenant.post("worker", {"threadId": thread, "runId": "r", "messages": "hi"})
    assert wrong_type.status_code == 400 and "messages" in wrong_type.json()["error"]
    bad_id = await tenant.post("worker", {"threadId": "a.b", "runId": "r", "messages": []})
    assert bad_id.status_code == 400 and "threadId" in bad_id.json()["error"]
    image = {"id": "m1", "role": "user", "content": [{"type": "image", "url": "http://x"}]}
    parts = await tenant.post("worker", {"threadId": thread, "runId": "r", "messages": [image]})
    assert parts.status_code == 400 and "image" in parts.json()["error"]
    # Nothing was created by a refused input: the thread's id is still free.
    async with httpx.AsyncClient(base_url=tenant.url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {tenant.key}"}
        absent = await http.get(f"/agency/{tenant.agency}/agent/{thread}/events", headers=auth)
    assert absent.status_code == 404 and "no agent thread" in absent.json()["error"], absent.text
    unknown = await tenant.post("nobody", {"threadId": thread, "runId": "r", "messages": []})
    assert unknown.status_code == 404 and "nobody" in unknown.json()["error"]
    # The AG-UI client raises the answer's status and message.
    bad_tool = {"name": "not a name", "description": "", "parameters": {"type": "object"}}
    got = await tenant.client("worker", [{"user": "hi", "tools": [bad_tool]}])
    (turn,) = got["turns"]
    assert turn["error"]["status"] == 400 and "tool name" in turn["error"]["message"]
    (turn,) = (await tenant.client("nobody", [{"user": "hi"}]))["turns"]
    assert (
        turn["error"]["status"] == 404 and "unknown agentType 'nobody'" in turn["error"]["message"]
    )
    async with httpx.AsyncClient(timeout=30) as http:
        anonymous = await http.post(tenant.route("worker"), json={"threadId": thread})
    assert anonymous.status_code == 401


async def test_a_thread_of_another_blueprint_is_a_conflict(tenant: Tenant) -> None:
    key = f"agui-switch-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="ok")])
    thread = str(uuid.uuid4())
    await tenant.client("worker", [{"user": f"{key}: hi"}], thread=thread)
    body = {
        "threadId": thread,
        "runId": "r2",
        "messages": [{"id": "u", "role": "user", "content": "x"}],
    }
    other = await tenant.post("approver", body)
    assert other.status_code == 409 and "worker" in other.json()["error"]


async def test_a_subagent_runs_as_a_step(tenant: Tenant) -> None:
    key, child = f"agui-sub-{tenant.agency}", f"agui-kid-{tenant.agency}"
    task = ScriptToolCall(name="task", arguments={"description": child, "subagentType": "worker"})
    tenant.llm.script(key, [ScriptStep(tool_calls=(task,)), ScriptStep(content="delegated")])
    tenant.llm.script(child, [ScriptStep(content="the child's part")])
    got = await tenant.client("manager", [{"user": f"{key}: delegate"}])
    events = got["turns"][0]["events"]
    kinds = types(events)
    (started,) = [e for e in events if e["type"] == "STEP_STARTED"]
    (finished,) = [e for e in events if e["type"] == "STEP_FINISHED"]
    assert started["stepName"] == finished["stepName"]
    assert started["stepName"].startswith("subagent worker ")
    assert kinds.index("STEP_STARTED") < kinds.index("STEP_FINISHED") < kinds.index("RUN_FINISHED")
    (result,) = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
    assert "the child's part" in result["content"]
    assert text_of(events) == "delegated"


async def test_a_run_id_used_before_on_the_thread_is_a_run_error(tenant: Tenant) -> None:
    key = f"agui-again-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="once")])
    thread = str(uuid.uuid4())
    text = {"id": "m1", "role": "user", "content": f"{key}: hi"}
    body = {"threadId": thread, "runId": "same", "messages": [text]}
    first = frames((await tenant.post("worker", body)).text)
    assert types(first)[-1] == "RUN_FINISHED" and text_of(first) == "once"
    again = frames((await tenant.post("worker", body)).text)
    assert types(again) == ["RUN_STARTED", "RUN_ERROR"] and again[1]["code"] == "run_exists"


async def test_a_run_out_of_steps_is_a_run_error_and_the_next_input_goes_on(
    tenant: Tenant,
) -> None:
    brief = {
        "name": "brief",
        "prompt": "You look up.",
        "tags": ["lookup"],
        "config": {"maxSteps": 1},
    }
    async with httpx.AsyncClient(base_url=tenant.url, timeout=30) as http:
        saved = await http.post(
            f"/agency/{tenant.agency}/blueprints",
            json=brief,
            headers={"Authorization": f"Bearer {tenant.key}"},
        )
    assert saved.status_code == 201, saved.text
    key = f"agui-steps-{tenant.agency}"
    lookup = ScriptToolCall(name="lookup", arguments={"word": "fig"})
    tenant.llm.script(key, [ScriptStep(tool_calls=(lookup,)), ScriptStep(content="found it")])
    got = await tenant.client("brief", [{"user": f"{key}: fig?"}, {"user": f"{key}: go on"}])
    first, second = got["turns"]
    assert types(first["events"])[-1] == "RUN_ERROR"
    assert first["events"][-1]["code"] == "paused_exhausted"
    assert types(second["events"])[-1] == "RUN_FINISHED", second
    assert text_of(second["events"]) == "found it"


async def test_a_thread_made_for_an_end_user_is_forgotten_with_them(tenant: Tenant) -> None:
    """`forwardedProps.endUserId` tags the thread the run creates (docs/data.md, "End
    users"): forgetting that user deletes it; a malformed one is refused, nothing made."""
    key = f"agui-user-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="noted")])
    thread = str(uuid.uuid4())
    props = {"endUserId": "zoe@example.com"}
    got = await tenant.client(
        "worker", [{"user": f"{key}: hi", "forwardedProps": props}], thread=thread
    )
    assert got["turns"][0]["error"] is None, got["turns"][0]
    bad = await tenant.post(
        "worker",
        {"threadId": str(uuid.uuid4()), "runId": "r", "messages": [],
         "forwardedProps": {"endUserId": "not an id"}},
    )  # fmt: skip
    assert bad.status_code == 400 and "forwardedProps.endUserId" in bad.json()["error"], bad.text
    auth = {"Authorization": f"Bearer {tenant.key}"}
    async with httpx.AsyncClient(base_url=tenant.url, timeout=30, headers=auth) as http:
        r = await http.post("/users/zoe@example.com/forget")
        assert r.status_code == 200, r.text
        assert r.json()["threads"] == [thread]
        gone = await http.get(f"/agency/{tenant.agency}/agent/{thread}/state")
        assert gone.status_code == 410, gone.text
