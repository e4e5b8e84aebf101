"""Streams that outlive their connection: the SDK's own reconnect after a proxy cuts a
stream mid-run, rejoins that name no modes, and a proxy that rewrites `Host`."""

from __future__ import annotations

import asyncio

import httpx
from langgraph_sdk import get_client
from langgraph_sdk.schema import StreamPart

from agency.services.llm.fake_scripts import ScriptStep
from tests.forwarding_proxy import proxy
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import WAIT, ask, call, collect

TEXT = "a fairly long answer streamed in many small chunks so that a cut lands mid-run"
MODES = ["messages-tuple", "values", "updates"]


def _script(lg: LangGraph, key: str) -> None:
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="w")]),
            ScriptStep(content=TEXT, stream_delay_ms=40),
        ],
    )


def _frames(parts: list[StreamPart]) -> list[tuple[str, str | None, object]]:
    """Every frame but `metadata` (each connection opens with one)."""
    return [(p.event, p.id, p.data) for p in parts if p.event != "metadata"]


def _text_chunk(part: StreamPart) -> bool:
    """A piece of the model's streamed answer (not a tool result)."""
    return (
        part.event == "messages"
        and part.data[1]["langgraph_node"] == "model"
        and bool(part.data[0].get("content"))
    )


async def test_a_stream_cut_mid_run_is_resumed_by_the_sdk_in_every_mode(lg: LangGraph) -> None:
    """Through a proxy that rewrites `Host` (nginx's plain `proxy_pass`) and then cuts the
    stream: the SDK reconnects itself and gets every mode, nothing missed, nothing twice."""
    key = "lg-cut-" + lg.agency
    _script(lg, key)
    async with (
        proxy(lg.url, rewrite_host=True) as front,
        get_client(url=f"{front.url}/langgraph", api_key=lg.key, timeout=60) as client,
    ):
        thread = (await client.threads.create(graph_id="worker"))["thread_id"]
        parts: list[StreamPart] = []
        async with asyncio.timeout(WAIT):
            async for part in client.runs.stream(
                thread, "worker", input=ask(key), stream_mode=MODES
            ):
                parts.append(part)
                if _text_chunk(part) and front.cuts == 0:
                    front.cut()  # mid-answer: more chunks are on their way
        assert front.cuts == 1
        run_id = parts[0].data["run_id"]
        rejoins = [r for r in front.requests if r.startswith(b"GET ") and b"/stream" in r]
        assert rejoins, "the SDK reconnected to the run's stream"
        assert all(b"/langgraph/threads/" in r for r in rejoins), rejoins

    full = await collect(lg.client.runs.join_stream(thread, run_id, stream_mode=MODES))
    assert _frames(parts) == _frames(full)
    assert "".join(p.data[0]["content"] for p in parts if _text_chunk(p)) == TEXT
    after_cut = parts[next(i for i, p in enumerate(parts) if _text_chunk(p)) + 1 :]
    assert [p.event for p in after_cut].count("metadata") == 1  # the reconnect's
    assert {"messages", "values", "updates"} <= {p.event for p in after_cut}


async def test_a_rejoin_without_modes_streams_the_modes_the_run_was_started_with(
    lg: LangGraph,
) -> None:
    key = "lg-rejoin-" + lg.agency
    _script(lg, key)
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    run = await lg.client.runs.create(thread, "worker", input=ask(key), stream_mode=MODES)
    joined = await collect(lg.client.runs.join_stream(thread, run["run_id"]))
    assert {"messages", "values", "updates"} <= {p.event for p in joined}
    again = await collect(lg.client.runs.join_stream(thread, run["run_id"], stream_mode=MODES))
    assert _frames(joined) == _frames(again)
    only = await collect(lg.client.runs.join_stream(thread, run["run_id"], stream_mode="updates"))
    assert {p.event for p in only} == {"metadata", "updates"}


async def test_locations_are_paths_under_the_base_url_behind_any_host(lg: LangGraph) -> None:
    """What a JS client joins onto its base URL and the Python one checks is same-origin."""
    key = "lg-location-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="here")])
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    async with (
        proxy(lg.url, rewrite_host=True) as front,
        httpx.AsyncClient(base_url=f"{front.url}/langgraph", timeout=WAIT) as http,
        http.stream(
            "POST",
            f"/threads/{thread}/runs/stream",
            json={"assistant_id": "worker", "input": ask(key)},
            headers={"x-api-key": lg.key, "X-Forwarded-Host": "elsewhere.example"},
        ) as answer,
    ):
        assert answer.status_code == 200
        body = b"".join([chunk async for chunk in answer.aiter_bytes()])
        run_id = answer.headers["content-location"].rsplit("/", 1)[1]
        assert answer.headers["content-location"] == f"/threads/{thread}/runs/{run_id}"
        assert answer.headers["location"] == f"/threads/{thread}/runs/{run_id}/stream"
        assert b"event: values" in body


async def test_a_thread_stream_follows_each_run_in_its_own_modes(lg: LangGraph) -> None:
    """`threads.join_stream`: every run of the thread, opened and closed by `metadata`;
    `Last-Event-ID` resumes (here from the log's start), then runs as they happen."""
    first, second = "lg-thread-a-" + lg.agency, "lg-thread-b-" + lg.agency
    lg.llm.script(first, [ScriptStep(content="first answer")])
    lg.llm.script(second, [ScriptStep(content="second answer", stream_delay_ms=20)] * 2)
    thread = (await lg.client.threads.create(graph_id="worker"))["thread_id"]
    done = await lg.client.runs.create(thread, "worker", input=ask(first), stream_mode="updates")
    await lg.client.runs.join(thread, done["run_id"])
    parts: list[StreamPart] = []
    runs_done: list[str] = []
    async with asyncio.timeout(WAIT):
        async for part in await lg.client.threads.join_stream(thread, last_event_id="0"):
            parts.append(part)
            if part.event == "metadata" and part.data.get("status") == "run_done":
                runs_done.append(part.data["run_id"])
                if len(runs_done) == 1:
                    await lg.client.runs.create(
                        thread, "worker", input=ask(second), stream_mode="messages-tuple"
                    )
                else:
                    break
    starts = [p.data["run_id"] for p in parts if p.event == "metadata" and "attempt" in p.data]
    assert starts == runs_done and len(set(starts)) == 2
    cut = next(i for i, p in enumerate(parts) if p.event == "metadata" and p.data.get("status"))
    assert {p.event for p in parts[:cut]} == {"metadata", "updates"}
    assert {p.event for p in parts[cut + 1 :]} == {"metadata", "messages"}
    text = "".join(p.data[0]["content"] for p in parts if _text_chunk(p))
    assert text == "second answer"


async def test_a_resumed_run_is_rejoined_in_the_modes_its_resume_asked_for(lg: LangGraph) -> None:
    key = "lg-resume-modes-" + lg.agency
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="r")]), ScriptStep(content="resumed")]
    )
    thread = (await lg.client.threads.create(graph_id="approver"))["thread_id"]
    paused = await lg.client.runs.create(thread, "approver", input=ask(key), stream_mode="values")
    await lg.client.runs.join(thread, paused["run_id"])
    resumed = await lg.client.runs.create(
        thread, "approver", command={"resume": True}, stream_mode=["updates", "messages-tuple"]
    )
    joined = await collect(lg.client.runs.join_stream(thread, resumed["run_id"]))
    assert {p.event for p in joined} == {"metadata", "updates", "messages"}
    first = await collect(lg.client.runs.join_stream(thread, paused["run_id"]))
    assert {p.event for p in first} == {"metadata", "values"}


async def test_a_cut_stream_resumes_on_another_api_server(lg: LangGraph) -> None:
    """The balancer sends the SDK's reconnect to a second API server, which has never seen
    the run: it streams every mode the run was started with, from the log."""
    key = "lg-other-api-" + lg.agency
    _script(lg, key)
    async with (
        proxy(lg.url) as front,
        get_client(url=f"{front.url}/langgraph", api_key=lg.key, timeout=60) as client,
    ):
        thread = (await client.threads.create(graph_id="worker"))["thread_id"]
        parts: list[StreamPart] = []
        async with asyncio.timeout(WAIT):
            async for part in client.runs.stream(
                thread, "worker", input=ask(key), stream_mode=MODES
            ):
                parts.append(part)
                if _text_chunk(part) and front.cuts == 0:
                    front.retarget(lg.other_url)
                    front.cut()
        assert front.cuts == 1
        rejoin = front.requests.index(next(r for r in front.requests if r.startswith(b"GET")))
        other_port = int(lg.other_url.rsplit(":", 1)[1])
        assert front.sent_to[rejoin][1] == other_port
    full = await collect(lg.client.runs.join_stream(thread, parts[0].data["run_id"]))
    assert _frames(parts) == _frames(full)
    assert "".join(p.data[0]["content"] for p in parts if _text_chunk(p)) == TEXT
