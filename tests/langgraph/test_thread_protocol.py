"""LangGraph's thread protocol (`threads.stream`): `POST /threads/{id}/commands` and `POST
/threads/{id}/stream/events`, through the Python SDK's `AsyncThreadStream` and as bytes on
the wire (the JS SDK's tests are in test_js_sdk.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from typing import Any

import httpx

from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import WAIT, ask, call

TEXT = "alpha beta gamma delta epsilon"


def _http(lg: LangGraph) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"{lg.url}/langgraph", headers={"x-api-key": lg.key}, timeout=WAIT
    )


async def _events(http: httpx.AsyncClient, thread_id: str, body: dict[str, Any]) -> list[Any]:
    """The stream's events up to the first root lifecycle that ends a run."""
    events: list[Any] = []
    async with (
        asyncio.timeout(WAIT),
        http.stream("POST", f"/threads/{thread_id}/stream/events", json=body) as r,
    ):
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            events.append(event)
            if event["method"] == "lifecycle" and event["params"]["data"]["event"] != "running":
                return events
    return events


async def test_the_python_sdks_thread_stream_runs_and_reads_the_output(lg: LangGraph) -> None:
    key = f"py-protocol-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content=TEXT, stream_delay_ms=20)])
    async with lg.client.threads.stream(assistant_id="worker") as thread:
        started = await thread.run.start(input=ask(key))
        tokens: list[str] = []
        async with asyncio.timeout(WAIT):
            async for event in thread.subscribe(["messages", "lifecycle"]):
                data = event["params"]["data"]
                if data.get("event") == "content-block-delta":
                    tokens.append(data["delta"]["text"])
                if event["method"] == "lifecycle" and data["event"] == "completed":
                    break
            output = await thread.output
    assert started["run_id"]
    assert "".join(tokens) == TEXT and len(tokens) > 1
    assert output["messages"][-1]["content"] == TEXT


async def test_since_resumes_after_a_seq_and_channels_filter(lg: LangGraph) -> None:
    key = f"wire-protocol-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content=TEXT)])
    thread_id = str(uuid.uuid4())
    async with _http(lg) as http:
        command = {"id": 1, "method": "run.start", "params": {"assistant_id": "worker"}}
        command["params"]["input"] = ask(key)
        r = await http.post(f"/threads/{thread_id}/commands", json=command)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["type"] == "success" and answer["id"] == 1 and answer["result"]["run_id"]
        whole = await _events(http, thread_id, {"channels": ["lifecycle", "values", "messages"]})
        assert [e["seq"] for e in whole] == sorted({e["seq"] for e in whole})
        assert {e["method"] for e in whole} == {"lifecycle", "values", "messages"}
        assert all(e["params"]["namespace"] == [] for e in whole)
        cut = whole[2]["seq"]
        rest = await _events(
            http, thread_id, {"channels": ["lifecycle", "values", "messages"], "since": cut}
        )
        assert rest == [e for e in whole if e["seq"] > cut]
        only = await _events(http, thread_id, {"channels": ["lifecycle"]})
        assert only == [e for e in whole if e["method"] == "lifecycle"]


async def test_bad_protocol_requests_are_refused_saying_why(lg: LangGraph) -> None:
    key = f"wire-bad-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="ok")])
    thread = await lg.client.threads.create(graph_id="worker")
    thread_id = thread["thread_id"]
    async with _http(lg) as http:
        path = f"/threads/{thread_id}/commands"
        r = await http.post(path, json={"id": 1, "method": "state.erase", "params": {}})
        assert r.status_code == 400 and "run.start, input.respond" in r.json()["error"]
        r = await http.post(path, json={"id": 1, "method": "state.fork", "params": {}})
        assert r.status_code == 400 and "checkpoint_id" in r.json()["error"]
        fork = {"checkpoint_id": "1"}
        r = await http.post(path, json={"id": 1, "method": "state.fork", "params": fork})
        assert r.status_code == 400 and "needs an input" in r.json()["error"]
        other = {"namespace": ["elsewhere"]}
        r = await http.post(path, json={"id": 1, "method": "state.get", "params": other})
        assert r.status_code == 404 and "root namespace" in r.json()["error"]
        inject = {"namespace": [], "message": {"role": "tool", "content": "x"}}
        r = await http.post(path, json={"id": 1, "method": "input.inject", "params": inject})
        assert r.status_code == 400 and "role" in r.json()["error"]
        r = await http.post(path, json={"method": "run.start"})
        assert r.status_code == 400
        r = await http.post(path, json={"id": 2, "method": "run.start", "params": {}})
        assert r.status_code == 400 and "assistant_id" in r.json()["error"]
        forked = {"assistant_id": "worker", "config": {"configurable": {"checkpoint_id": "c"}}}
        r = await http.post(path, json={"id": 3, "method": "run.start", "params": forked})
        assert r.status_code == 400 and "event seq" in r.json()["error"]
        respond = {"interrupt_id": "nope", "namespace": [], "response": True}
        r = await http.post(path, json={"id": 4, "method": "input.respond", "params": respond})
        assert r.status_code == 404 and "not pending" in r.json()["error"]
        events = f"/threads/{thread_id}/stream/events"
        r = await http.post(events, json={"channels": []})
        assert r.status_code == 400 and "channel" in r.json()["error"]
        r = await http.post(events, json={"channels": ["debug"]})
        assert r.status_code == 400 and "'debug'" in r.json()["error"]
        r = await http.post(f"/threads/{uuid.uuid4()}/stream/events", json={"channels": ["values"]})
        assert r.status_code == 404


async def test_run_start_with_input_on_an_interrupted_thread_resumes_it(lg: LangGraph) -> None:
    """As LangGraph's server: `run.start` on a thread awaiting approval is a resume, its
    `input` the resume value."""
    key = f"wire-resume-{lg.agency}"
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="done")]
    )
    thread_id = str(uuid.uuid4())
    channels = {"channels": ["lifecycle", "input"]}
    async with _http(lg) as http:
        path = f"/threads/{thread_id}/commands"
        start = {"assistant_id": "approver", "input": ask(key)}
        r = await http.post(path, json={"id": 1, "method": "run.start", "params": start})
        assert r.status_code == 200, r.text
        paused = await _events(http, thread_id, channels)
        assert [e["method"] for e in paused] == ["lifecycle", "input.requested", "lifecycle"]
        assert paused[-1]["params"]["data"]["event"] == "interrupted"
        approve = {"assistant_id": "approver", "input": {"decisions": [{"type": "approve"}]}}
        r = await http.post(path, json={"id": 2, "method": "run.start", "params": approve})
        assert r.status_code == 200, r.text
        assert "~" in r.json()["result"]["run_id"]  # the stretch of the run after its pause
        rest = await _events(http, thread_id, {**channels, "since": paused[-1]["seq"]})
        assert [e["params"]["data"]["event"] for e in rest] == ["running", "completed"]
    state = await lg.client.threads.get_state(thread_id)
    assert [m["type"] for m in state["values"]["messages"]] == ["human", "ai", "tool", "ai"]


async def test_input_respond_carries_update_and_goto_and_run_start_forks_from(
    lg: LangGraph,
) -> None:
    """`input.respond` with `goto: "model"` skips the calls (its `update` follows their
    results); `run.start` from a checkpoint starts from that checkpoint's state."""
    key = f"wire-respond-goto-{lg.agency}"
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="skipped")]
    )
    thread = await lg.client.threads.create(graph_id="approver")
    thread_id = thread["thread_id"]
    paused = await lg.client.runs.wait(thread_id, "approver", input=ask(key))
    assert isinstance(paused, dict)
    interrupt_id = paused["__interrupt__"][0]["id"]
    first = (await lg.client.threads.get_history(thread_id))[-1]["checkpoint"]["checkpoint_id"]
    async with _http(lg) as http:
        path = f"/threads/{thread_id}/commands"
        update = {"messages": [{"role": "user", "content": "never mind"}]}
        respond = {"interrupt_id": interrupt_id, "response": None, "goto": "model",
                   "update": update}  # fmt: skip
        r = await http.post(path, json={"id": 1, "method": "input.respond", "params": respond})
        assert r.status_code == 200, r.text
        done = await lg.client.runs.join(
            thread_id, (await lg.client.runs.list(thread_id))[0]["run_id"]
        )
        assert isinstance(done, dict)
        contents = [m["content"] for m in done["messages"]]
        assert contents[-2:] == ["never mind", "skipped"]
        forked = {"assistant_id": "approver", "input": {"messages": []},
                  "config": {"configurable": {"checkpoint_id": first}}}  # fmt: skip
        r = await http.post(path, json={"id": 2, "method": "run.start", "params": forked})
        assert r.status_code == 200, r.text
    history = await lg.client.threads.get_history(thread_id, limit=50)
    assert any(
        (h["parent_checkpoint"] or {}).get("checkpoint_id") == first
        and [m["content"] for m in h["values"]["messages"]] == [key]
        for h in history
    )


async def test_a_breakpoint_before_the_model_reads_as_interrupted_with_no_input_asked(
    lg: LangGraph,
) -> None:
    key = f"wire-breakpoint-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content=TEXT)])
    thread_id = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    await lg.client.runs.wait(thread_id, "worker", input=ask(key), interrupt_before=["model"])
    async with _http(lg) as http:
        events = await _events(http, thread_id, {"channels": ["lifecycle", "input"]})
    # The run paused: `interrupted`, and no `input.requested` (there is no interrupt).
    assert [(e["method"], e["params"]["data"]["event"]) for e in events] == [
        ("lifecycle", "running"),
        ("lifecycle", "interrupted"),
    ]


async def test_another_tenants_thread_is_not_found_over_the_protocol_socket(lg: LangGraph) -> None:
    """Tenant B, with its own key, on tenant A's thread over the WebSocket transport: every
    read is `no_such_run`, nothing of A's is sent."""
    from websockets.asyncio.client import connect

    from tests.langgraph.conftest import new_tenant

    key = f"ws-own-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="private to A")])
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    await lg.client.runs.wait(
        thread, "worker", input={"messages": [{"role": "user", "content": key}]}
    )
    other_key, _, _ = await new_tenant(lg.url, "ws-other")
    url = lg.url.replace("http://", "ws://") + f"/langgraph/threads/{thread}/stream/events"
    async with (
        asyncio.timeout(WAIT),
        connect(url, additional_headers={"x-api-key": other_key}, open_timeout=10) as socket,
    ):
        answers = []
        for i, (method, params) in enumerate([
            ("subscription.subscribe", {"channels": ["values", "messages"]}),
            ("state.get", {"namespace": []}),
            ("state.listCheckpoints", {"limit": 5}),
            ("agent.getTree", {}),
        ]):  # fmt: skip
            await socket.send(json.dumps({"id": i, "method": method, "params": params}))
            answers.append(json.loads(await socket.recv()))
    assert [a["type"] for a in answers] == ["error"] * 4, answers
    assert all(a["error"] == "no_such_run" for a in answers), answers
    assert "private to A" not in json.dumps(answers)


async def test_the_tasks_and_checkpoints_channels_follow_the_run(lg: LangGraph) -> None:
    """Through the Python SDK: a task starts and ends per model call and per tool call, and
    each checkpoint's id is one `state.listCheckpoints` lists, linked to its parent."""
    key = f"py-protocol-tasks-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="w")], delay_ms=300),
            ScriptStep(content="looked up", delay_ms=300),
        ],
    )
    events: list[Any] = []
    async with lg.client.threads.stream(assistant_id="worker") as thread:
        await thread.run.start(input=ask(key))
        async with asyncio.timeout(WAIT):
            async for event in thread.subscribe(["tasks", "checkpoints", "lifecycle"]):
                events.append(event)
                data = event["params"]["data"]
                if event["method"] == "lifecycle" and data["event"] == "completed":
                    break
        thread_id = thread.thread_id
    tasks = [e["params"]["data"] for e in events if e["method"] == "tasks"]
    assert [t["name"] for t in tasks if "triggers" in t] == ["model", "tools", "model"]
    assert [t["name"] for t in tasks if "result" in t] == ["model", "tools", "model"]
    checkpoints = [e["params"]["data"] for e in events if e["method"] == "checkpoints"]
    async with _http(lg) as http:
        command = {"id": 1, "method": "state.listCheckpoints", "params": {"limit": 100}}
        r = await http.post(f"/threads/{thread_id}/commands", json=command)
        assert r.status_code == 200, r.text
        listed = {c["id"] for c in r.json()["result"]["checkpoints"]}
    assert len(checkpoints) >= 4 and {c["id"] for c in checkpoints} <= listed
    for before, after in itertools.pairwise(checkpoints):
        assert after["parent_id"] == before["id"]
    assert checkpoints[0]["source"] == "input"


async def test_a_reconnect_is_told_to_subscribe_again(lg: LangGraph) -> None:
    thread = await lg.client.threads.create(graph_id="worker")
    async with _http(lg) as http:
        reconnect = {"id": 7, "method": "subscription.reconnect", "params": {"run_id": "r"}}
        r = await http.post(f"/threads/{thread['thread_id']}/commands", json=reconnect)
        assert r.status_code == 200, r.text
        assert r.json() == {"type": "success", "id": 7, "result": {"restored": False}}
        r = await http.post(f"/threads/{uuid.uuid4()}/commands", json=reconnect)
        assert r.status_code == 404
