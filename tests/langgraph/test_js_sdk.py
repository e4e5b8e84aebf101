"""The LangGraph JS SDK from npm (tests/js, pinned by its lockfile) on node, against the
whole system: through a proxy that cuts event streams mid-run (the SDK reconnects by
itself, where the answer's `Location` says, with `Last-Event-ID`) and through one that
rewrites `Host` as nginx's plain `proxy_pass` does. What LangGraph's own server does is
what is expected."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agency.services.llm.fake_scripts import ScriptStep
from tests.cutting_proxy import Proxy
from tests.jsclients import run_node
from tests.langgraph.conftest import LangGraph, new_tenant
from tests.langgraph.helpers import call, collect

TEXT = "one two three four five six seven eight nine ten eleven twelve"


@pytest.fixture
async def nginx(lg: LangGraph) -> AsyncIterator[Proxy]:
    """A proxy that rewrites `Host` as nginx's `proxy_pass http://agency;` does."""
    async with Proxy(lg.url, host="agency") as proxy:
        yield proxy


def _env(url: str, lg: LangGraph) -> dict[str, str]:
    return {"LG_URL": f"{url}/langgraph", "LG_KEY": lg.key}


def _script(lg: LangGraph, name: str) -> str:
    """A run that calls a tool, then streams its answer word by word: long enough to be
    cut in the middle."""
    key = f"js-{name}-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="w")]),
            ScriptStep(content=TEXT, stream_delay_ms=60),
        ],
    )
    return key


def _frames(parts: list[dict[str, Any]]) -> list[tuple[str, Any, str | None]]:
    return [(p["event"], p["data"], p.get("id")) for p in parts if p["event"] != "metadata"]


async def _whole(lg: LangGraph, thread: str, run: str, modes: list[str]) -> list[Any]:
    """The run's frames as the Python SDK reads them afterwards, from the start."""
    parts = await collect(lg.client.runs.join_stream(thread, run, stream_mode=modes))
    return [(p.event, p.data, p.id) for p in parts if p.event != "metadata"]


async def test_info_and_ok_answer_as_langgraphs_server(lg: LangGraph) -> None:
    got = await run_node("sdk.mjs", "info", env=_env(lg.url, lg))
    assert got["/info"]["status"] == 200, got
    assert isinstance(json.loads(got["/info"]["body"]), dict)
    assert got["/ok"]["status"] == 200, got
    assert json.loads(got["/ok"]["body"]) == {"ok": True}


@pytest.mark.parametrize(
    "modes", [["values"], ["messages-tuple"], ["updates"], ["events"]], ids=lambda m: m[0]
)
async def test_a_stream_cut_mid_run_is_resumed_by_the_sdk(lg: LangGraph, modes: list[str]) -> None:
    key = _script(lg, "cut-" + modes[0])
    async with Proxy(lg.url, cut_after=3, cuts=1) as cutting:
        got = await run_node(
            "sdk.mjs",
            "stream",
            json.dumps({"text": key, "modes": modes}),
            env=_env(cutting.url, lg),
        )
    assert cutting.cut == 1, "the stream was cut once"
    first, *again = cutting.streams()
    assert first.method == "POST"
    thread, run = got["created"]["thread_id"], got["created"]["run_id"]
    assert thread == got["thread"]["thread_id"]
    # The SDK reconnected where `Location` said, through the same proxy, after the last
    # frame it had.
    assert [s.path.split("?")[0] for s in again] == [
        f"/langgraph/threads/{thread}/runs/{run}/stream"
    ]
    (cut_id,) = cutting.cut_ids
    assert cut_id is not None and again[0].headers.get("last-event-id") == cut_id
    frames = _frames(got["parts"])
    # Nothing missed, nothing twice: what the SDK gave is the run's whole stream.
    assert frames == await _whole(lg, thread, run, modes)
    assert got["state"]["values"]["messages"][-1]["content"] == TEXT
    if modes == ["messages-tuple"]:
        tokens = [d[0]["content"] for e, d, _ in frames if d[0]["type"] == "AIMessageChunk"]
        assert "".join(tokens) == TEXT


async def test_a_stream_through_a_proxy_that_rewrites_host_resumes_through_it(
    lg: LangGraph,
) -> None:
    """nginx's `proxy_pass http://agency;` sends `Host: agency`: the API must not send the
    client to `http://agency/...` (a name only the proxy knows) to resume."""
    key = _script(lg, "nginx")
    modes = ["messages-tuple", "values"]
    async with Proxy(lg.url, host="agency", cut_after=4, cuts=1) as nginx:
        got = await run_node(
            "sdk.mjs", "stream", json.dumps({"text": key, "modes": modes}), env=_env(nginx.url, lg)
        )
    assert nginx.cut == 1
    thread, run = got["created"]["thread_id"], got["created"]["run_id"]
    assert [s.path.split("?")[0] for s in nginx.streams()[1:]] == [
        f"/langgraph/threads/{thread}/runs/{run}/stream"
    ]
    assert _frames(got["parts"]) == await _whole(lg, thread, run, modes)


async def test_wait_history_and_get_through_a_proxy_that_rewrites_host(
    lg: LangGraph, nginx: Proxy
) -> None:
    key = f"js-wait-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="waited for")])
    got = await run_node("sdk.mjs", "wait", json.dumps({"text": key}), env=_env(nginx.url, lg))
    assert [m["type"] for m in got["values"]["messages"]] == ["human", "ai"]
    assert got["values"]["messages"][-1]["content"] == "waited for"
    history = got["history"]
    assert [len(h["values"]["messages"]) for h in history] == [2, 1]
    assert (
        history[0]["parent_checkpoint"]["checkpoint_id"]
        == (history[1]["checkpoint"]["checkpoint_id"])
    )
    assert got["got"]["status"] == "idle" and got["got"]["metadata"]["graph_id"] == "worker"


async def test_a_background_run_is_followed_with_join_stream_and_joined(
    lg: LangGraph, nginx: Proxy
) -> None:
    key = _script(lg, "join")
    modes = ["messages-tuple", "values"]
    got = await run_node(
        "sdk.mjs", "join", json.dumps({"text": key, "modes": modes}), env=_env(nginx.url, lg)
    )
    thread, run = got["thread"]["thread_id"], got["run"]["run_id"]
    assert got["run"]["status"] in ("pending", "running")
    assert _frames(got["parts"]) == await _whole(lg, thread, run, modes)
    assert got["joined"]["messages"][-1]["content"] == TEXT
    assert [r["run_id"] for r in got["runs"]] == [run]


async def test_join_stream_without_modes_streams_the_runs_own(lg: LangGraph) -> None:
    """LangGraph's server remembers the modes a run was started with: a client that joins
    it again (as `useStream` does after a reload) gets the tokens, not only `values`."""
    key = _script(lg, "remembered")
    modes = ["messages-tuple", "values"]
    got = await run_node(
        "sdk.mjs", "join", json.dumps({"text": key, "started": modes}), env=_env(lg.url, lg)
    )
    events = {p["event"] for p in got["parts"]}
    assert {"messages", "values"} <= events, events
    thread, run = got["thread"]["thread_id"], got["run"]["run_id"]
    assert _frames(got["parts"]) == await _whole(lg, thread, run, modes)


async def test_join_stream_from_minus_one_replays_the_run_from_its_start(lg: LangGraph) -> None:
    """`useStream` rejoins a run after a reload with `Last-Event-ID: -1`: LangGraph's
    server replays the run from its start, then follows it."""
    key = _script(lg, "replayed")
    modes = ["messages-tuple", "values"]
    got = await run_node(
        "sdk.mjs",
        "join",
        json.dumps({"text": key, "modes": modes, "started": modes, "lastEventId": "-1"}),
        env=_env(lg.url, lg),
    )
    thread, run = got["thread"]["thread_id"], got["run"]["run_id"]
    assert _frames(got["parts"]) == await _whole(lg, thread, run, modes)


async def test_an_interrupt_is_resumed_with_command_resume(lg: LangGraph, nginx: Proxy) -> None:
    key = f"js-hitl-{lg.agency}"
    lg.llm.script(
        key,
        [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="approved, done")],
    )
    resume = {"decisions": [{"type": "approve"}]}
    got = await run_node(
        "sdk.mjs",
        "interrupt",
        json.dumps({"text": key, "modes": ["updates", "values"], "resume": resume}),
        env=_env(nginx.url, lg),
    )
    updates = [p["data"] for p in got["paused"] if p["event"] == "updates"]
    (interrupt,) = updates[-1]["__interrupt__"]
    (request,) = interrupt["value"]["action_requests"]
    assert request["name"] == "lookup" and request["args"] == {"word": "w"}
    assert got["waiting"]["status"] == "interrupted"
    assert got["state"]["next"] == ["tools"] and got["state"]["interrupts"] == [interrupt]
    resumed = [p["data"] for p in got["resumed"] if p["event"] == "updates"]
    assert [next(iter(u)) for u in resumed] == ["tools", "model"]
    assert resumed[-1]["model"]["messages"][0]["content"] == "approved, done"
    assert got["after"]["status"] == "idle"
    assert [m["type"] for m in got["history"][0]["values"]["messages"]] == [
        "human",
        "ai",
        "tool",
        "ai",
    ]


async def test_the_active_run_is_canceled(lg: LangGraph, nginx: Proxy) -> None:
    key = f"js-cancel-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="never", delay_ms=20_000)])
    got = await run_node("sdk.mjs", "cancel", json.dumps({"text": key}), env=_env(nginx.url, lg))
    assert got["after"]["status"] == "interrupted"
    assert got["got"]["status"] == "idle"


async def test_a_thread_named_by_the_client_without_an_assistant_takes_a_run(
    lg: LangGraph,
) -> None:
    key = f"js-named-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="named")])
    got = await run_node("sdk.mjs", "named", json.dumps({"text": key}), env=_env(lg.url, lg))
    assert got["thread"]["thread_id"] == got["id"]
    assert got["values"]["messages"][-1]["content"] == "named"


async def test_a_run_creates_its_thread_if_not_exists(lg: LangGraph) -> None:
    key = f"js-created-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="created")])
    got = await run_node("sdk.mjs", "createdByRun", json.dumps({"text": key}), env=_env(lg.url, lg))
    assert got["values"]["messages"][-1]["content"] == "created"
    assert got["got"]["thread_id"] == got["id"]
    assert got["got"]["metadata"]["graph_id"] == "worker"


def _of(events: list[dict[str, Any]], method: str) -> list[Any]:
    return [e["data"] for e in events if e["method"] == method]


def _lifecycle(events: list[dict[str, Any]]) -> list[str]:
    return [d["event"] for d in _of(events, "lifecycle")]


async def test_the_thread_protocol_streams_a_runs_tokens_and_its_end(lg: LangGraph) -> None:
    """`threads.stream`: `run.start` (`POST …/commands`) creates the thread and starts the
    run; the SDK's subscription (`POST …/stream/events`) gets its tokens as the model
    streams them, then its end."""
    key = f"js-protocol-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content=TEXT, stream_delay_ms=30)])
    got = await run_node("sdk.mjs", "threadStream", json.dumps({"text": key}), env=_env(lg.url, lg))
    events = got["first"]
    assert got["started"]["run_id"]
    assert _lifecycle(events) == ["running", "completed"]
    assert events[-1]["method"] == "lifecycle"
    messages = _of(events, "messages")
    assert messages[0] == {"event": "message-start", "role": "ai", "id": messages[0]["id"]}
    tokens = [m["delta"]["text"] for m in messages if m["event"] == "content-block-delta"]
    assert len(tokens) > 1 and "".join(tokens) == TEXT
    assert messages[-1]["event"] == "message-finish"
    ids, seqs = [e["id"] for e in events], [e["seq"] for e in events]
    assert len(set(ids)) == len(ids) and seqs == sorted(set(seqs))
    assert got["output"] == [key, TEXT]
    assert got["state"]["values"]["messages"][-1]["content"] == TEXT
    assert got["interrupts"] == [] and got["resumed"] is None


async def test_the_thread_protocol_resumes_an_interrupt_with_input_respond(lg: LangGraph) -> None:
    key = f"js-protocol-hitl-{lg.agency}"
    lg.llm.script(
        key,
        [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="approved, done")],
    )
    resume = {"decisions": [{"type": "approve"}]}
    got = await run_node(
        "sdk.mjs",
        "threadStream",
        json.dumps({"text": key, "graph": "approver", "resume": resume}),
        env=_env(lg.url, lg),
    )
    first, resumed = got["first"], got["resumed"]
    assert _lifecycle(first) == ["running", "interrupted"]
    (asked,) = _of(first, "input.requested")
    (request,) = asked["payload"]["action_requests"]
    assert request["name"] == "lookup" and request["args"] == {"word": "w"}
    (interrupt,) = got["interrupts"]
    assert interrupt["interruptId"] == asked["interrupt_id"] and interrupt["namespace"] == []
    assert _lifecycle(resumed) == ["running", "completed"]
    tools = _of(resumed, "tools")
    assert [t["event"] for t in tools] == ["tool-started", "tool-finished"]
    assert tools[0]["tool_name"] == "lookup" and tools[0]["input"] == {"word": "w"}
    assert not {e["id"] for e in first} & {e["id"] for e in resumed}
    types = [m["type"] for m in got["state"]["values"]["messages"]]
    assert types == ["human", "ai", "tool", "ai"]
    assert got["state"]["values"]["messages"][-1]["content"] == "approved, done"


async def test_the_thread_protocol_on_another_tenants_thread_is_not_found(lg: LangGraph) -> None:
    key = f"js-protocol-own-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="private")])
    thread = await lg.client.threads.create(graph_id="worker")
    await lg.client.runs.wait(
        thread["thread_id"], "worker", input={"messages": [{"role": "user", "content": key}]}
    )
    other_key, _, _ = await new_tenant(lg.url, "intruder")
    got = await run_node(
        "sdk.mjs",
        "threadStreamOf",
        json.dumps({"threadId": thread["thread_id"]}),
        env={"LG_URL": f"{lg.url}/langgraph", "LG_KEY": other_key},
    )
    assert got["subscribe"]["status"] == 404, got
    assert got["respond"]["status"] == 404, got
    assert "not found" in got["subscribe"]["message"]


async def test_the_thread_protocols_state_tree_fork_and_inject_commands(lg: LangGraph) -> None:
    """The JS SDK's `thread.input.inject`, `thread.state.get` / `listCheckpoints` /
    `fork` and `thread.agent.getTree` on a thread whose agent delegates to a subagent."""
    key, child = f"js-commands-{lg.agency}", f"js-commands-child-{lg.agency}"
    slow = "thinking it over before delegating, one small piece at a time"
    lg.llm.script(
        key,
        [
            ScriptStep(
                content=slow, stream_delay_ms=60,
                tool_calls=[call("task", description=child, subagentType="worker")],
            ),
            ScriptStep(content="delegated and done"),
        ],
    )  # fmt: skip
    lg.llm.script(child, [ScriptStep(content="the child's part")])
    lg.llm.script(f"fork-{key}", [ScriptStep(content="the fork's answer")])
    got = await run_node(
        "sdk.mjs",
        "threadCommands",
        json.dumps({"text": key, "inject": "and keep it short", "fork": f"fork-{key}"}),
        env=_env(lg.url, lg),
    )
    contents = [m["content"] for m in got["state"]["values"]["messages"]]
    # Taken up by the run before its second model call: one run, the message in its middle.
    assert "and keep it short" in contents and contents[-1] == "delegated and done"
    assert contents.index("and keep it short") < len(contents) - 1
    assert set(got["some"]["values"]) <= {"todos"}
    assert got["state"]["checkpoint"]["id"] == got["checkpoints"]["checkpoints"][0]["id"]
    ids = [int(c["id"]) for c in got["checkpoints"]["checkpoints"]]
    assert ids == sorted(ids, reverse=True) and len(ids) >= 4
    assert [int(c["id"]) for c in got["older"]["checkpoints"]] == ids[2:4]
    tree = got["tree"]["tree"]
    assert tree["namespace"] == [] and tree["graph_name"] == "manager"
    assert tree["status"] == "completed"
    (sub,) = tree["children"]
    assert sub["graph_name"] == "worker" and sub["namespace"] == [sub["metadata"]["thread_id"]]
    assert sub["status"] == "completed"
    assert got["forked"]["thread_id"] != got["threadId"] and got["forked"]["run_id"]
    fork_contents = [m["content"] for m in got["forkValues"]["messages"]]
    assert fork_contents[0] == key and fork_contents[-1] == "the fork's answer"
    assert "delegated and done" not in fork_contents


@pytest.mark.parametrize("header", [False, True], ids=["browser-query-key", "x-api-key"])
async def test_the_thread_protocol_over_a_websocket_streams_and_resumes(
    lg: LangGraph, header: bool
) -> None:
    """`threads.stream(…, {transport: "websocket"})`: commands and events on one socket,
    the key in the URL as a browser must send it (or in `x-api-key`)."""
    key = f"js-socket-{header}-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(content="checking first", stream_delay_ms=20,
                       tool_calls=[call("lookup", word="w")]),
            ScriptStep(content="approved over the socket", stream_delay_ms=20),
        ],
    )  # fmt: skip
    resume = {"decisions": [{"type": "approve"}]}
    got = await run_node(
        "sdk.mjs",
        "threadSocket",
        json.dumps({"text": key, "resume": resume, "header": header}),
        env=_env(lg.url, lg),
    )
    assert all(u.startswith("ws://") and "/stream/events" in u for u in got["opened"])
    assert got["started"]["run_id"]
    first, resumed = got["first"], got["resumed"]
    assert _lifecycle(first) == ["running", "interrupted"]
    tokens = [
        m["delta"]["text"] for m in _of(first, "messages") if m["event"] == "content-block-delta"
    ]
    assert "".join(tokens) == "checking first" and len(tokens) > 1
    (interrupt,) = got["interrupts"]
    assert interrupt["namespace"] == []
    assert resumed is not None and _lifecycle(resumed) == ["running", "completed"]
    assert [t["event"] for t in _of(resumed, "tools")] == ["tool-started", "tool-finished"]
    assert not {e["id"] for e in first} & {e["id"] for e in resumed}
    messages = got["state"]["values"]["messages"]
    assert messages[-1]["content"] == "approved over the socket"


async def test_images_checkpoints_delays_and_goto_through_the_js_sdk(lg: LangGraph) -> None:
    names = ("beyond", "beyond-later", "goto", "send")
    text, later, paused, sent = (f"js-{n}-{lg.agency}" for n in names)
    lg.llm.script(text, [ScriptStep(content="seen")] * 3)
    lg.llm.script(later, [ScriptStep(content="later")] * 3)
    lg.llm.script(
        paused, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="skipped")]
    )
    image = "data:image/png;base64,iVBORw0KGgo="
    lg.llm.script(
        sent, [ScriptStep(tool_calls=[call("lookup", word="sent")]), ScriptStep(content="ran it")]
    )
    params = {"text": text, "image": image, "later": later, "paused": paused, "sent": sent}
    got = await run_node("sdk.mjs", "beyondInput", json.dumps(params), env=_env(lg.url, lg))
    sent = got["first"]["messages"][0]["content"]
    assert sent == [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": image}},
    ]
    assert [m["content"] for m in got["branched"]["messages"][1:]] == ["seen", later, "later"]
    assert got["delayed"]["status"] == "pending"
    assert got["joined"]["messages"][-1]["content"] == "later"
    skipped = got["skipped"]["messages"]
    # The calls skipped (rejected), the update's message after their results, then the model.
    assert [m["type"] for m in skipped] == ["human", "ai", "tool", "human", "ai"]
    assert [m["content"] for m in skipped[-2:]] == ["skip it", "skipped"]
    ran = got["ran"]["messages"]
    assert [m["type"] for m in ran] == ["human", "ai", "tool", "ai"]
    assert "sent" in ran[2]["content"] and ran[-1]["content"] == "ran it"
