"""How LangGraph's run and thread semantics map where Agency's differ: new input on an
interrupted thread, the runs a thread lists, history before a checkpoint, thread search
by values with `select`, the `custom` stream mode."""

from __future__ import annotations

import asyncio

import pytest
from langgraph_sdk.errors import BadRequestError, ConflictError, NotFoundError

from agency.infra.jetstream.connection import Bus
from agency.services.llm.fake_scripts import ScriptStep
from tests.langgraph.conftest import LangGraph
from tests.langgraph.helpers import WAIT, ask, call, collect, until_status


async def _paused(lg: LangGraph, name: str) -> tuple[str, str, str]:
    """A thread of `approver` whose run awaits approval; its run and a second key."""
    key = f"lg-{name}-{lg.agency}"
    lg.llm.script(
        key, [ScriptStep(tool_calls=[call("lookup", word="w")]), ScriptStep(content="approved")]
    )
    lg.llm.script(key + "-2", [ScriptStep(content=f"{name} fresh")] * 3)
    thread = str((await lg.client.threads.create(graph_id="approver"))["thread_id"])
    run = await lg.client.runs.create(thread, "approver", input=ask(key))
    await lg.client.runs.join(thread, run["run_id"])
    assert (await lg.client.threads.get(thread))["status"] == "interrupted"
    return thread, run["run_id"], key + "-2"


async def test_new_input_on_an_interrupted_thread_withdraws_the_approval(lg: LangGraph) -> None:
    thread, paused, second = await _paused(lg, "supersede")
    final = await lg.client.runs.wait(thread, "approver", input=ask(second))
    assert isinstance(final, dict) and "__interrupt__" not in final
    assert [m["type"] for m in final["messages"]] == ["human", "ai", "tool", "human", "ai"]
    assert final["messages"][2]["content"].startswith("Not run")
    assert final["messages"][-1]["content"] == "supersede fresh"
    # Its stretch ended at the interrupt; the run was then canceled, its calls not run.
    assert (await lg.client.runs.get(thread, paused))["status"] == "success"
    got = await lg.client.threads.get(thread)
    assert got["status"] == "idle" and got["interrupts"] == {}


async def test_runs_list_names_resumed_stretches_and_not_refused_runs(lg: LangGraph) -> None:
    thread, paused, second = await _paused(lg, "listed")
    resumed = await lg.client.runs.create(thread, "approver", command={"resume": True})
    assert resumed["run_id"].startswith(paused + "~")
    await lg.client.runs.join(thread, resumed["run_id"])
    slow = f"lg-listed-slow-{lg.agency}"
    # The longest key mentioned wins, by the thread's model step: one for every step.
    lg.llm.script(slow, [ScriptStep(content="slowly", delay_ms=20_000)] * 4)
    busy = await lg.client.runs.create(thread, "approver", input=ask(slow))
    await until_status(lg.client, thread, busy["run_id"], {"running"})
    with pytest.raises(ConflictError, match="busy"):
        await lg.client.runs.create(thread, "approver", input=ask(second))
    runs = await lg.client.runs.list(thread)
    assert [r["run_id"] for r in runs] == [busy["run_id"], resumed["run_id"], paused]
    assert [r["status"] for r in runs] == ["running", "success", "success"]
    assert [r["run_id"] for r in await lg.client.runs.list(thread, status="error")] == []
    await lg.client.runs.cancel(thread, busy["run_id"], wait=True)


async def test_history_before_a_checkpoint_starts_below_it(lg: LangGraph) -> None:
    thread, _, second = await _paused(lg, "history")
    await lg.client.runs.wait(thread, "approver", input=ask(second))
    history = await lg.client.threads.get_history(thread, limit=10)
    assert len(history) >= 3
    ids = [h["checkpoint"]["checkpoint_id"] for h in history]
    below = await lg.client.threads.get_history(thread, before=history[1]["checkpoint"])
    assert [h["checkpoint"]["checkpoint_id"] for h in below] == ids[2:]
    by_id = await lg.client.threads.get_history(thread, before=ids[0], limit=1)
    assert [h["checkpoint"]["checkpoint_id"] for h in by_id] == ids[1:2]
    config = {"configurable": {"thread_id": thread, "checkpoint_id": ids[1]}}
    by_config = await lg.client.threads.get_history(thread, before=config)  # type: ignore[arg-type]
    assert [h["checkpoint"]["checkpoint_id"] for h in by_config] == ids[2:]


async def test_thread_search_by_values_and_select(lg: LangGraph) -> None:
    key = "lg-search-values-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="found by values")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    other = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    final = await lg.client.runs.wait(thread, "worker", input=ask(key))
    assert isinstance(final, dict)
    found = await lg.client.threads.search(
        values={"messages": final["messages"]}, select=["thread_id", "status"]
    )
    assert found == [{"thread_id": thread, "status": "idle"}]
    empty = await lg.client.threads.search(values={"todos": []}, select=["thread_id"])
    assert {t["thread_id"] for t in empty} == {thread, other}
    with pytest.raises(BadRequestError, match="not a thread field"):
        await lg.client.threads.search(select=["nonsense"])


async def test_the_custom_stream_mode_is_accepted_and_sends_nothing(lg: LangGraph) -> None:
    key = "lg-custom-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="no custom frames")])
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    parts = await collect(
        lg.client.runs.stream(thread, "worker", input=ask(key), stream_mode=["custom", "values"])
    )
    assert {p.event for p in parts} == {"metadata", "values"}
    with pytest.raises(NotFoundError):
        await lg.client.runs.get(thread, "run_nosuch")


async def test_a_run_of_another_assistant_switches_the_thread_to_it(lg: LangGraph) -> None:
    """On an idle thread, or with `interrupt`; the history stays. A busy thread refuses
    with `reject`."""
    key = "lg-switch-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="switch slow", delay_ms=20_000)])
    lg.llm.script(key + "-2", [ScriptStep(content="switched")] * 3)
    lg.llm.script(key + "-3", [ScriptStep(content="switched back")] * 4)
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    slow = await lg.client.runs.create(thread, "worker", input=ask(key))
    await until_status(lg.client, thread, slow["run_id"], {"running"})
    with pytest.raises(ConflictError, match="waits for it with multitask_strategy 'enqueue'"):
        await lg.client.runs.create(
            thread, "approver", input=ask(key + "-2"), multitask_strategy="reject"
        )
    final = await lg.client.runs.wait(
        thread, "approver", input=ask(key + "-2"), multitask_strategy="interrupt"
    )
    assert isinstance(final, dict) and final["messages"][-1]["content"] == "switched"
    assert (await lg.client.threads.get(thread))["metadata"]["graph_id"] == "approver"
    back = await lg.client.runs.wait(thread, "worker", input=ask(key + "-3"))
    assert isinstance(back, dict) and back["messages"][-1]["content"] == "switched back"
    assert [m["type"] for m in back["messages"]] == ["human", "human", "ai", "human", "ai"]
    async with asyncio.timeout(WAIT):  # the read model follows the log
        while True:
            if await lg.client.threads.search(metadata={"graph_id": "worker"}, ids=[thread]):
                break
            await asyncio.sleep(0.05)
    runs = await lg.client.runs.list(thread)
    assert [r["assistant_id"] for r in runs] == ["worker", "approver", "worker"]


async def test_a_run_of_another_assistant_enqueued_on_a_busy_thread_runs_after_as_it(
    lg: LangGraph, bus: Bus
) -> None:
    key = "lg-switch-queued-" + lg.agency
    lg.llm.script(key, [ScriptStep(content="worker first", delay_ms=1500)])
    lg.llm.script(key + "-2", [ScriptStep(content="approver next")] * 3)
    thread = str((await lg.client.threads.create(graph_id="worker"))["thread_id"])
    first = await lg.client.runs.create(thread, "worker", input=ask(key))
    await until_status(lg.client, thread, first["run_id"], {"running"})
    queued = await lg.client.runs.create(
        thread, "approver", input=ask(key + "-2"), multitask_strategy="enqueue"
    )
    # It waits its turn: the worker's run goes on as the worker's, nothing joins it.
    assert (await lg.client.runs.get(thread, queued["run_id"]))["status"] == "pending"
    assert (await lg.client.threads.get(thread))["metadata"]["graph_id"] == "worker"
    done = await lg.client.runs.join(thread, queued["run_id"])
    assert isinstance(done, dict)
    contents = [m["content"] for m in done["messages"]]
    assert contents == [key, "worker first", key + "-2", "approver next"]
    runs = await lg.client.runs.list(thread)
    assert [(r["assistant_id"], r["status"]) for r in runs] == [
        ("approver", "success"),
        ("worker", "success"),
    ]
    assert (await lg.client.threads.get(thread))["metadata"]["graph_id"] == "approver"
    # The switch is on the log where it took effect: after the worker's run, before the
    # approver's began.
    kinds = [
        (e.type, getattr(e.payload, "run_id", None))
        for e in await bus.store.read(lg.tenant, "thread", thread)
        if e.type in ("run.completed", "thread.blueprint_switched", "run.started")
    ]
    assert kinds == [
        ("run.started", first["run_id"]),
        ("run.completed", first["run_id"]),
        ("thread.blueprint_switched", queued["run_id"]),
        ("run.started", queued["run_id"]),
        ("run.completed", queued["run_id"]),
    ]
