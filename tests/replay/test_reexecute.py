"""`agency replay --re-execute`: the current code over a recorded history, compared."""

from __future__ import annotations

import json
from pathlib import Path

from agency.contracts.events import HitlInterrupt, ToolCall
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from agency.services.runtime.replay.recorded import split_record
from agency.services.runtime.replay.reexecute import reexecute
from tests.helpers import settled
from tests.replay.apps import with_audit, with_broken_hook
from tests.replay.conftest import Ran, call, child_thread, cli, todos
from tests.runtime.conftest import Agents, make_system


def task(description: str, kind: str = "worker") -> ScriptToolCall:
    return call("task", description=description, subagentType=kind)


async def tool_run(agents: Agents) -> tuple[str, list[RecordedEvent]]:
    key = "reexec-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(todos("look up"),)),
        ScriptStep(tool_calls=(
            call("lookup", word="agent"),
            call("write_file", path="notes.md", content="# notes"),
        )),
        ScriptStep(content="All done."),
    ])  # fmt: skip
    thread = await agents.thread()
    await agents.invoke(thread, f"please work {key}")
    return thread, await agents.wait_terminal(thread)


async def re_execute(thread: str, app: str, data_dir: Path, *flags: str) -> Ran:
    """`agency replay <thread> --re-execute` with the app `tests.replay.apps:<app>`."""
    return await cli(
        "replay", thread, "--re-execute", "--app", f"tests.replay.apps:{app}", *flags,
        "--data-dir", str(data_dir),
    )  # fmt: skip


async def test_unchanged_code_re_executes_to_the_same_events(
    agents: Agents, data_dir: Path
) -> None:
    thread, events = await tool_run(agents)
    produced = split_record(agents.tenant, thread, events).produced
    ran = await re_execute(thread, "recorded", data_dir)
    assert ran.status == 0, ran.out + ran.err
    assert ran.lines[-1] == f"same: {len(produced)} events compared"
    # The state tools ran again (their results are the runtime's); the external one did not.
    assert {"model.completed", "tool.requested", "tool.output", "file.written"} <= {
        e.type for e in produced
    }


async def test_an_added_middleware_is_reported_at_the_first_divergence(
    agents: Agents, data_dir: Path
) -> None:
    thread, events = await tool_run(agents)
    report = await reexecute([events], with_audit())
    assert not report.same
    divergence = report.comparisons[0].divergence
    assert divergence is not None and divergence.recorded and divergence.reexecuted
    # The recorded step went on to call the model; the new code runs one more hook first.
    assert divergence.recorded.type == "model.started"
    assert divergence.reexecuted.type == "middleware.before_model"
    assert divergence.reexecuted.seq == divergence.recorded.seq

    ran = await re_execute(thread, "with_audit", data_dir)
    assert ran.status == 1
    text = ran.out
    assert "diverged at produced event" in text
    assert "recorded" in text and "re-executed" in text
    columns = next(line for line in ran.lines if "model.started" in line and "│" in line)
    recorded_side, reexecuted_side = columns.split("│")
    assert f"#{divergence.recorded.seq} model.started" in recorded_side
    assert f"#{divergence.recorded.seq} middleware.before_model" in reexecuted_side
    assert any("audit" in line.split("│")[-1] for line in ran.lines if "│" in line)
    assert ran.lines[-1] == "diverged"


async def test_a_changed_tool_result_is_reported_side_by_side(
    agents: Agents, data_dir: Path
) -> None:
    thread, _ = await tool_run(agents)
    ran = await re_execute(thread, "with_terse_todos", data_dir, "--json")
    assert ran.status == 1
    report = json.loads(ran.out)
    assert report["same"] is False
    divergence = report["threads"][0]["divergence"]
    assert divergence["recorded"]["type"] == divergence["reexecuted"]["type"] == "tool.output"
    assert any(d.startswith("output:") and "'ok'" in d for d in divergence["differences"])


async def test_human_decisions_and_cancels_are_replayed_from_the_record(agents: Agents) -> None:
    key = "reexec-hitl-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(call("lookup", word="original"),)),
        ScriptStep(content="finished"),
        ScriptStep(content="never finished", delay_ms=3000),
    ])  # fmt: skip
    thread = await agents.thread("approver")
    await agents.invoke(thread, key)
    paused = await agents.wait_for(thread, lambda es: "run.paused" in [e.type for e in es])
    proposed = next(e.payload for e in paused if isinstance(e.payload, HitlInterrupt))
    held = proposed.proposed_tool_calls[0]
    edited = ToolCall(id=held.id, name="lookup", arguments='{"word": "edited"}')
    await agents.approve(thread, approved=True, modified=(edited,))
    await agents.wait_terminal(thread)
    # A second run canceled while its model call is in flight.
    await agents.invoke(thread, key + " again")
    await agents.wait_for(thread, lambda es: [e.type for e in es].count("model.started") == 3)
    await agents.cancel(thread)
    events = await agents.wait_terminal(thread, count=2)
    assert settled(events)[-1].type == "run.canceled"

    report = await reexecute([events], make_system())
    assert report.same, report.comparisons
    assert report.comparisons[0].compared == len(
        split_record(agents.tenant, thread, events).produced
    )


async def test_a_tree_re_executes_parent_and_children_together(
    agents: Agents, data_dir: Path
) -> None:
    key = "reexec-tree-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(call("lookup", word="parent"),)),
        ScriptStep(content="parent done"),
    ])  # fmt: skip
    agents.llm.script(key + "-child", [
        ScriptStep(tool_calls=(call("write_file", path="c.md", content="c"),)),
        ScriptStep(content="child done"),
    ])  # fmt: skip
    parent = await agents.thread()
    child = await child_thread(agents, parent)
    await agents.invoke(parent, key)
    await agents.invoke(child, key + "-child")
    await agents.wait_terminal(parent)
    await agents.wait_terminal(child)

    ran = await re_execute(parent, "recorded", data_dir, "--tree")
    assert ran.status == 0, ran.out
    assert any(line.startswith(f"thread {parent}: same:") for line in ran.lines)
    assert any(line.startswith(f"thread {child}: same:") for line in ran.lines)
    assert ran.lines[-1].endswith("across 2 threads")


async def test_a_subagent_tree_spawned_by_task_re_executes(agents: Agents, data_dir: Path) -> None:
    key = "reexec-task-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(task(f"child job {key}"),)),
        ScriptStep(content="manager done"),
    ])  # fmt: skip
    agents.llm.script(f"child job {key}", [ScriptStep(content="child report")])
    parent = await agents.thread("manager")
    await agents.invoke(parent, key)
    await agents.wait_terminal(parent, timeout=30)

    ran = await re_execute(parent, "recorded", data_dir, "--tree")
    assert ran.status == 0, ran.out
    assert ran.lines[-1].endswith("across 2 threads")


async def test_code_that_raises_is_reported_not_crashed(agents: Agents) -> None:
    _, events = await tool_run(agents)
    report = await reexecute([events], with_broken_hook())
    assert not report.same
    comparison = report.comparisons[0]
    # The failure names the middleware, its hook and the app's line it raised at.
    assert comparison.failed is not None
    assert comparison.failed.startswith(
        "the runtime raised MiddlewareFailed: middleware 'planning' "
        "(BrokenMiddleware.before_model) raised at tests/replay/apps.py, line "
    )
    assert comparison.failed.endswith("in before_model: RuntimeError: the new hook is broken")


async def test_model_errors_queued_requests_and_background_children_replay(agents: Agents) -> None:
    key = "reexec-misc-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="slow first", delay_ms=300)])
    agents.llm.script(
        key + "-bad", [ScriptStep(content="x"), ScriptStep(status=400, content="refused")]
    )
    thread = await agents.thread()
    await agents.invoke(thread, key)
    await agents.invoke(thread, key + "-bad")  # queued behind the first run
    events = await agents.wait_terminal(thread, count=2)
    assert [e.type for e in events if e.type.startswith("run.") and e.type != "run.tick"][
        -1
    ] == "run.error"

    manager_key = "reexec-bg-" + agents.tenant
    agents.llm.script(manager_key, [
        ScriptStep(tool_calls=(task(f"background job {manager_key}", "background"),)),
        ScriptStep(content="started it"),
        ScriptStep(content="got the report"),
    ])  # fmt: skip
    agents.llm.script(
        f"background job {manager_key}", [ScriptStep(content="bg report", delay_ms=200)]
    )
    manager = await agents.thread("manager")
    await agents.invoke(manager, manager_key)
    managed = await agents.wait_terminal(manager, count=2, timeout=30)
    child = next(e.payload.child_thread_id for e in managed if e.type == "subagent.spawned")  # type: ignore[attr-defined]
    child_events = await agents.wait_terminal(child)

    report = await reexecute([events], make_system())
    assert report.same, report.comparisons
    report = await reexecute([managed, child_events], make_system())
    assert report.same, report.comparisons
