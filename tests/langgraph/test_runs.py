"""Runs through the official LangGraph SDK client: wait, background runs and join, the four
stream modes, cancel, and each multitask strategy."""

from __future__ import annotations

import asyncio

import pytest
from langgraph_sdk.errors import APIStatusError, BadRequestError, ConflictError

from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import ask, call, collect, until_status


async def _thread(lg: LangGraph, assistant: str = "worker") -> str:
    return str((await lg.client.threads.create(graph_id=assistant))["thread_id"])


async def test_stream_values_ends_with_the_answer(lg: LangGraph) -> None:
    key = "lg-values-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="all done here")])
    thread = await _thread(lg)
    parts = await collect(lg.client.runs.stream(thread, "worker", input=ask(key)))
    assert parts[0].event == "metadata" and parts[0].data["run_id"]
    values = [p for p in parts if p.event == "values"]
    assert [m["type"] for m in values[-1].data["messages"]] == ["human", "ai"]
    assert values[-1].data["messages"][-1]["content"] == "all done here"
    ids = [int(p.id) for p in parts[1:] if p.id is not None]
    assert ids == sorted(ids) and len(ids) == len(parts) - 1


async def test_stream_updates_name_the_model_and_the_tools(lg: LangGraph) -> None:
    key = "lg-updates-" + lg.agency
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="x")]),
            ScriptStep(content="found it"),
        ],
    )
    thread = await _thread(lg)
    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode="updates")
    )
    updates = [p.data for p in parts if p.event == "updates"]
    nodes = [next(iter(u)) for u in updates]
    assert nodes == ["model", "tools", "model"]
    (proposed,) = updates[0]["model"]["messages"][0]["tool_calls"]
    assert proposed["name"] == "lookup" and proposed["args"] == {"word": "x"}
    assert updates[1]["tools"]["messages"][0]["tool_call_id"] == proposed["id"]
    assert updates[2]["model"]["messages"][0]["content"] == "found it"


async def test_stream_messages_tuple_streams_the_tokens(lg: LangGraph) -> None:
    key = "lg-tokens-" + lg.agency
    text = "one two three four five six seven eight"
    lg.llm.script(key, [ScriptStep(content=text, stream_delay_ms=40)])
    thread = await _thread(lg)
    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode="messages-tuple")
    )
    chunks = [p.data for p in parts if p.event == "messages"]
    assert len(chunks) > 1, "the tokens arrive in several chunks"
    assert "".join(chunk["content"] for chunk, _ in chunks) == text
    assert {chunk["id"] for chunk, _ in chunks} == {chunks[0][0]["id"]}
    assert all(meta["langgraph_node"] == "model" for _, meta in chunks)
    state = await lg.client.threads.get_state(thread)
    assert state["values"]["messages"][-1]["id"] == chunks[0][0]["id"]


async def test_stream_messages_sends_the_text_so_far_then_each_whole_message(
    lg: LangGraph,
) -> None:
    key = "lg-partials-" + lg.agency
    text = "one two three four five six seven eight"
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="z")]),
            ScriptStep(content=text, stream_delay_ms=40),
        ],
    )
    thread = await _thread(lg)
    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode="messages")
    )
    messages = [p for p in parts if p.event.startswith("messages")]
    partials = [p.data[0] for p in messages if p.event == "messages/partial"]
    assert len(partials) > 1, "the text arrives in several parts"
    texts = [m["content"] for m in partials]
    assert texts == sorted(texts, key=len) and texts[-1] == text
    assert all(text.startswith(t) for t in texts) and {m["type"] for m in partials} == {"ai"}
    complete = [p.data[0] for p in messages if p.event == "messages/complete"]
    assert [m["type"] for m in complete] == ["ai", "tool", "ai"]
    assert complete[0]["tool_calls"][0]["name"] == "lookup"
    assert complete[-1]["content"] == text and complete[-1]["id"] == partials[0]["id"]
    heads = [p.data for p in messages if p.event == "messages/metadata"]
    assert [next(iter(h)) for h in heads] == [m["id"] for m in complete]
    nodes = [h[m["id"]]["metadata"]["langgraph_node"] for h, m in zip(heads, complete, strict=True)]
    assert nodes == ["model", "tools", "model"]


async def test_stream_events_follows_the_model_and_tools(lg: LangGraph) -> None:
    key = "lg-events-" + lg.agency
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("lookup", word="y")]),
            ScriptStep(content="evented in a few words", stream_delay_ms=40),
        ],
    )
    thread = await _thread(lg)
    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode=["events"])
    )
    kinds = [p.data["event"] for p in parts if p.event == "events"]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end"
    for kind in (
        "on_chat_model_start",
        "on_chat_model_stream",
        "on_chat_model_end",
        "on_tool_start",
        "on_tool_end",
    ):
        assert kind in kinds
    ends = [p.data for p in parts if p.event == "events" and p.data["event"] == "on_tool_end"]
    assert ends[0]["name"] == "lookup"


async def test_background_run_is_joined(lg: LangGraph) -> None:
    key = "lg-join-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="joined", delay_ms=300)])
    thread = await _thread(lg)
    run = await lg.client.runs.create(thread, "worker", input=ask(key))
    assert run["status"] in ("pending", "running") and run["thread_id"] == thread
    final = await lg.client.runs.join(thread, run["run_id"])
    assert final["messages"][-1]["content"] == "joined"
    got = await lg.client.runs.get(thread, run["run_id"])
    assert got["status"] == "success" and got["assistant_id"] == "worker"
    assert [r["run_id"] for r in await lg.client.runs.list(thread)] == [run["run_id"]]


async def test_cancel_ends_the_active_run(lg: LangGraph) -> None:
    key = "lg-cancel-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="never", delay_ms=20_000)])
    thread = await _thread(lg)
    run = await lg.client.runs.create(thread, "worker", input=ask(key))
    await until_status(lg.client, thread, run["run_id"], {"running"})
    await lg.client.runs.cancel(thread, run["run_id"], wait=True)
    assert (await lg.client.runs.get(thread, run["run_id"]))["status"] == "interrupted"
    assert (await lg.client.threads.get(thread))["status"] == "idle"
    with pytest.raises(ConflictError, match="only an active or a queued run"):
        await lg.client.runs.cancel(thread, run["run_id"])
    with pytest.raises(BadRequestError, match="rollback"):
        await lg.client.runs.cancel(thread, run["run_id"], action="rollback")


async def _busy(lg: LangGraph, name: str, delay_ms: int) -> tuple[str, str, str]:
    key = f"lg-{name}-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content=f"{name} first", delay_ms=delay_ms)])
    # The longest key mentioned wins, by step: the second run answers at step 0 or 1.
    lg.llm.script(key + "-2", [ScriptStep(content=f"{name} second")] * 2)
    thread = await _thread(lg)
    first = await lg.client.runs.create(thread, "worker", input=ask(key))
    await until_status(lg.client, thread, first["run_id"], {"running"})
    return thread, first["run_id"], key + "-2"


async def test_multitask_reject_is_the_default(lg: LangGraph) -> None:
    thread, first, second = await _busy(lg, "reject", 20_000)
    with pytest.raises(ConflictError, match="busy"):
        await lg.client.runs.create(thread, "worker", input=ask(second))
    with pytest.raises(ConflictError, match="busy") as refused:
        await lg.client.runs.create(
            thread, "worker", input=ask(second), multitask_strategy="reject"
        )
    # The runtime's own reason, as the log holds it.
    assert f"run {first} is active" in str(refused.value), str(refused.value)
    assert (await lg.client.runs.get(thread, first))["status"] == "running"
    await lg.client.runs.cancel(thread, first, wait=True)


async def test_multitask_enqueue_runs_after_the_active_run(lg: LangGraph) -> None:
    thread, first, second = await _busy(lg, "enqueue", 1_500)
    queued = await lg.client.runs.create(
        thread, "worker", input=ask(second), multitask_strategy="enqueue"
    )
    assert queued["status"] == "pending" and queued["multitask_strategy"] == "enqueue"
    final = await lg.client.runs.join(thread, queued["run_id"])
    contents = [m["content"] for m in final["messages"]]
    assert contents[1] == "enqueue first" and contents[-1] == "enqueue second"
    assert (await lg.client.runs.get(thread, first))["status"] == "success"


async def test_a_queued_run_is_canceled_alone_and_never_joins_the_active_run(
    lg: LangGraph,
) -> None:
    """The active run is held inside a slow model call while two runs are enqueued: one is
    canceled by `runs.cancel`, the other by `cancel_many(status="pending")`. Neither starts
    nor joins; the active run goes on and completes; the thread ends idle."""
    thread, first, second = await _busy(lg, "withdrawn", 2_500)
    one = await lg.client.runs.create(
        thread, "worker", input=ask(second), multitask_strategy="enqueue"
    )
    two = await lg.client.runs.create(
        thread, "worker", input=ask(second + " again"), multitask_strategy="enqueue"
    )
    assert one["status"] == two["status"] == "pending"
    await lg.client.runs.cancel(thread, one["run_id"], wait=True)
    assert (await lg.client.runs.get(thread, one["run_id"]))["status"] == "interrupted"
    assert (await lg.client.runs.get(thread, first))["status"] == "running"
    await lg.client.runs.cancel_many(thread_id=thread, status="pending")
    await until_status(lg.client, thread, two["run_id"], {"interrupted"})
    final = await lg.client.runs.join(thread, first)
    contents = [m["content"] for m in final["messages"]]
    assert contents[-1] == "withdrawn first" and not any(second in c for c in contents)
    assert (await lg.client.runs.get(thread, first))["status"] == "success"
    assert (await lg.client.threads.get(thread))["status"] == "idle"
    with pytest.raises(ConflictError, match="only an active or a queued run"):
        await lg.client.runs.cancel(thread, one["run_id"])


async def test_multitask_interrupt_cancels_the_active_run(lg: LangGraph) -> None:
    thread, first, second = await _busy(lg, "interrupt", 20_000)
    final = await lg.client.runs.wait(
        thread, "worker", input=ask(second), multitask_strategy="interrupt"
    )
    assert isinstance(final, dict)
    assert final["messages"][-1]["content"] == "interrupt second"
    assert (await lg.client.runs.get(thread, first))["status"] == "interrupted"


async def test_multitask_rollback_does_not_map(lg: LangGraph) -> None:
    thread = await _thread(lg)
    with pytest.raises(BadRequestError, match="rollback"):
        await lg.client.runs.create(thread, "worker", input=ask("x"), multitask_strategy="rollback")
    with pytest.raises(BadRequestError, match="interrupt_after 'agent'"):
        await lg.client.runs.create(thread, "worker", input=ask("x"), interrupt_after=["agent"])


async def test_a_stateless_run_gets_a_thread_of_its_own(lg: LangGraph) -> None:
    key = "lg-stateless-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="no thread needed")] * 2)
    created: list[dict[str, object]] = []
    final = await lg.client.runs.wait(
        None, "worker", input=ask(key), on_run_created=lambda meta: created.append(dict(meta))
    )
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "no thread needed"
    (meta,) = created
    thread = await lg.client.threads.get(str(meta["thread_id"]))
    assert thread["metadata"]["graph_id"] == "worker" and thread["status"] == "idle"
    parts = await collect(lg.client.runs.stream(None, "worker", input=ask(key)))
    assert parts[-1].data["messages"][-1]["content"] == "no thread needed"
    with pytest.raises(BadRequestError, match="no interrupt"):
        await lg.client.runs.create(None, "worker", command={"resume": True})


async def test_a_stateless_run_on_completion_delete_deletes_its_thread(lg: LangGraph) -> None:
    """The answer comes whole; the thread is deleted once the run ended (410 from then)."""
    key = "lg-forget-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="said once")] * 3)
    created: list[dict[str, object]] = []

    def note(meta: object) -> None:
        created.append(dict(meta))  # type: ignore[call-overload]

    final = await lg.client.runs.wait(
        None, "worker", input=ask(key), on_completion="delete", on_run_created=note
    )
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "said once"
    parts = await collect(
        lg.client.runs.stream(
            None, "worker", input=ask(key), on_completion="delete", on_run_created=note
        )
    )
    assert parts[-1].data["messages"][-1]["content"] == "said once"
    run = await lg.client.runs.create(None, "worker", input=ask(key), on_completion="delete")
    thread_ids = [str(m["thread_id"]) for m in created] + [run["thread_id"]]
    assert len(set(thread_ids)) == 3

    async def answer(thread_id: str) -> tuple[int, str]:
        try:
            await lg.client.threads.get(thread_id)
        except APIStatusError as e:
            return e.status_code, str(e)
        return 200, ""

    async def all_gone() -> None:
        for thread_id in thread_ids:
            status, text = await answer(thread_id)
            assert status == 410 and "at the request of run:" in text, (thread_id, status)

    await assert_eventually(all_gone, timeout=30)
    kept = await lg.client.threads.create(graph_id="worker")
    with pytest.raises(BadRequestError, match="stateless"):
        await lg.client.runs.create(
            kept["thread_id"], "worker", input=ask(key), on_completion="delete"
        )


async def test_runs_on_a_slow_model_are_waited_on_and_streamed_whole(lg: LangGraph) -> None:
    """A model that takes seconds: the wait and the stream learn the run's status from the
    thread's feed early on, then follow the rest of the run live on the same feed; each
    event once, none missed."""
    text = "slowly, one word after another, the answer comes"
    steps = [
        ScriptStep(tool_calls=[call("lookup", word="slow")], delay_ms=700),
        ScriptStep(content=text, delay_ms=700, stream_delay_ms=60),
    ]
    waited_key, streamed_key = "lg-slow-wait-" + lg.agency, "lg-slow-stream-" + lg.agency
    lg.llm.script(waited_key, steps)
    lg.llm.script(streamed_key, steps)
    waited, streamed = await _thread(lg), await _thread(lg)
    final, parts = await asyncio.gather(
        lg.client.runs.wait(waited, "worker", input=ask(waited_key)),
        collect(
            lg.client.runs.stream(
                streamed,
                "worker",
                input=ask(streamed_key),
                stream_mode=["messages-tuple", "values"],
            )
        ),
    )
    assert isinstance(final, dict)
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "ai"]
    assert final["messages"][-1]["content"] == text
    chunks = [p.data for p in parts if p.event == "messages"]
    tokens = [chunk for chunk, _ in chunks if chunk["type"] == "AIMessageChunk"]
    assert len(tokens) > 1, "the answer streamed in several chunks"
    assert "".join(chunk["content"] for chunk in tokens) == text
    for mode in ("messages", "values"):
        ids = [int(p.id) for p in parts if p.event == mode and p.id is not None]
        assert ids == sorted(set(ids)), f"each event once, in order ({mode})"
    values = [p.data for p in parts if p.event == "values"]
    assert values[-1]["messages"][-1]["content"] == text


async def test_a_command_update_is_what_the_run_starts_from(lg: LangGraph) -> None:
    key = f"lg-command-update-{lg.agency}"
    lg.llm.script(key, [ScriptStep(content="updated and answered")])
    thread = await _thread(lg)
    update = {"messages": [{"role": "user", "content": key}], "files": {"notes.md": "kept"}}
    final = await lg.client.runs.wait(thread, "worker", command={"update": update})
    assert isinstance(final, dict)
    assert [m["content"] for m in final["messages"]] == [key, "updated and answered"]
    assert final["files"]["notes.md"] == "kept"
    with pytest.raises(BadRequestError, match="todos"):
        await lg.client.runs.create(thread, "worker", command={"update": {"todos": []}})


async def test_the_clients_own_tools_are_called_and_answered_by_its_next_input(
    lg: LangGraph,
) -> None:
    """`input.tools` (as AG-UI's LangGraph client sends its frontend tools): the model calls
    one, the run ends with the call open for the client, whose tool message answers it in
    the next run. A tool message that answers no open call is refused."""
    key = f"lg-client-tools-{lg.agency}"
    lg.llm.script(
        key,
        [
            ScriptStep(tool_calls=[call("pick_color", hint="warm")], delay_ms=300),
            ScriptStep(content="you picked red", delay_ms=300),
        ],
    )
    thread = await _thread(lg)
    tools = [{"name": "pick_color", "description": "Ask the user for a color",
              "parameters": {"type": "object", "properties": {"hint": {"type": "string"}}}}]  # fmt: skip
    first = await lg.client.runs.wait(thread, "worker", input={**ask(key), "tools": tools})
    assert isinstance(first, dict)
    asked = first["messages"][-1]
    assert asked["type"] == "ai" and asked["tool_calls"][0]["name"] == "pick_color"
    assert (await lg.client.threads.get(thread))["status"] == "idle"
    answer = {"type": "tool", "tool_call_id": asked["tool_calls"][0]["id"], "content": "red"}
    final = await lg.client.runs.wait(thread, "worker", input={"messages": [answer]})
    assert isinstance(final, dict)
    assert [m["type"] for m in final["messages"][-2:]] == ["tool", "ai"]
    assert final["messages"][-2]["content"] == "red"
    assert final["messages"][-1]["content"] == "you picked red"
    stray = {"type": "tool", "tool_call_id": "nope", "content": "x"}
    with pytest.raises(BadRequestError, match="answers no open call"):
        await lg.client.runs.create(thread, "worker", input={"messages": [stray]})
