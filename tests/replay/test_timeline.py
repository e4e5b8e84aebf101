"""`agency replay`: a recorded run as a readable timeline, straight from JetStream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from tests.replay.conftest import NOWHERE, call, child_thread, cli, todos
from tests.runtime.conftest import Agents


async def known_run(agents: Agents) -> tuple[str, list[RecordedEvent]]:
    key = "timeline-" + agents.tenant
    agents.llm.script(key, [
        ScriptStep(tool_calls=(todos("look up"),)),
        ScriptStep(tool_calls=(call("lookup", word="agent"),)),
        ScriptStep(content="All done."),
    ])  # fmt: skip
    thread = await agents.thread()
    await agents.invoke(thread, f"please work {key}")
    return thread, await agents.wait_terminal(thread)


def event_type(line: str) -> str:
    return line.split()[3]


async def test_replay_prints_the_run_as_a_timeline(agents: Agents, data_dir: Path) -> None:
    thread, events = await known_run(agents)
    ran = await cli("replay", thread, "--data-dir", str(data_dir))
    assert ran.status == 0, ran.err
    header, lines = ran.lines[0], ran.lines[1:]
    assert header.startswith(f"# thread {thread} agent worker")
    # Every event but the streamed deltas, in order.
    assert [event_type(line) for line in lines] == [
        e.type for e in events if e.type != "model.delta"
    ]
    line = {event_type(line): line for line in lines}
    assert "agent worker" in line["thread.created"]
    assert any(event_type(x) == "message.appended" and "user: please work" in x for x in lines)
    assert any(event_type(x) == "model.completed" and "write_todos(" in x for x in lines)
    assert 'lookup({"word": "agent"})' in line["tool.requested"]
    assert "lookup → definition of agent" in line["tool.output"]
    assert "completed: All done." in line["run.completed"]
    assert line["tool.requested"].split()[2] == "2"  # the step column: asked in step 2


async def test_replay_filters_by_sequence_and_type_and_prints_json(
    agents: Agents, data_dir: Path
) -> None:
    thread, events = await known_run(agents)
    d = str(data_dir)
    ran = await cli("replay", thread, "--type", "tool.*", "--data-dir", d)
    assert {event_type(line) for line in ran.lines[1:]} == {
        "tool.requested", "tool.started", "tool.output"
    }  # fmt: skip

    ran = await cli(
        "replay", thread, "--from-seq", "3", "--until-seq", "6", "--json", "--data-dir", d
    )
    objects = [json.loads(line) for line in ran.lines]
    assert [o["seq"] for o in objects] == [3, 4, 5, 6]
    first = objects[0]
    assert first["threadId"] == thread and first["depth"] == 0
    assert first["event"]["seq"] == 3 and first["event"]["type"] == first["type"]
    assert first["streamSeq"] == next(e.stream_seq for e in events if e.seq == 3)


async def test_replay_tree_interleaves_children_in_log_order(
    agents: Agents, data_dir: Path
) -> None:
    key = "tree-" + agents.tenant
    agents.llm.script(key, [ScriptStep(content="parent answer")])
    agents.llm.script(key + "-child", [ScriptStep(content="child answer")])
    parent = await agents.thread()
    await agents.invoke(parent, key)
    await agents.wait_terminal(parent)
    child = await child_thread(agents, parent)
    grandchild = await child_thread(agents, child)
    await agents.invoke(child, key + "-child")
    await agents.wait_terminal(child)
    await agents.invoke(parent, key)
    await agents.wait_terminal(parent, count=2)

    ran = await cli("replay", parent, "--tree", "--json", "--data-dir", str(data_dir))
    objects = [json.loads(line) for line in ran.lines]
    seqs = [o["streamSeq"] for o in objects]
    assert seqs == sorted(seqs)
    assert {o["threadId"]: o["depth"] for o in objects} == {parent: 0, child: 1, grandchild: 2}
    threads = [o["threadId"] for o in objects]
    first_child = threads.index(child)
    assert parent in threads[:first_child] and parent in threads[first_child:]

    ran = await cli("replay", parent, "--tree", "--data-dir", str(data_dir))
    head = ran.lines[:3]
    assert parent in head[0] and child in head[1] and grandchild in head[2]
    assert any("child answer" in line for line in ran.lines[3:])


async def test_replay_and_reexecution_never_touch_postgresql(
    agents: Agents, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the read models down (DATABASE_URL points nowhere), replay works from the log."""
    thread, _ = await known_run(agents)
    monkeypatch.setenv("DATABASE_URL", NOWHERE)
    attempts: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(args)
        raise OSError("PostgreSQL is stopped")

    monkeypatch.setattr(asyncpg, "connect", refuse)
    monkeypatch.setattr(asyncpg, "create_pool", refuse)
    d = str(data_dir)
    assert (await cli("replay", thread, "--data-dir", d)).status == 0
    assert (await cli("replay", thread, "--tree", "--json", "--data-dir", d)).status == 0
    ran = await cli(
        "replay", thread, "--re-execute", "--app", "tests.runtime.apps:system", "--data-dir", d
    )
    assert ran.status == 0 and "same:" in ran.out
    assert attempts == []


async def test_replay_of_an_unknown_thread_says_so(agents: Agents, data_dir: Path) -> None:
    ran = await cli("replay", "01NOSUCHTHREAD", "--data-dir", str(data_dir))
    assert ran.status == 2
    assert "01NOSUCHTHREAD has no events" in ran.err
