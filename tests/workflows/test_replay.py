"""A workflow's whole history replayed from the log: the controller's decisions and every
member's thread re-executed with the current code, without a model call."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
from pathlib import Path

import msgspec
from structlog.testing import capture_logs

from agency.contracts.commands import CreateThread
from agency.contracts.events import BlueprintSaved, BlueprintSpec, MemberInvoked
from agency.domain.comparison import format_comparison
from agency.domain.workflow_decisions import member_thread_id
from agency.domain.workflow_members import member_blueprint, workflow_id, workflow_request
from agency.infra.endpoints import Endpoints, write_endpoints
from agency.infra.jetstream.records import RecordedEvent
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.workflows.cli import commands as workflow_cmd
from agency.services.workflows.cli.replay import check_controller, load_workflow, replay_workflow
from tests.helpers import assert_eventually
from tests.runtime.conftest import make_system
from tests.workflows.conftest import Workflows


def cast(tenant: str) -> dict[str, BlueprintSpec]:
    return {
        n: BlueprintSpec(name=n, prompt=f"Your script is {n}-{tenant}.")
        for n in ("author", "editor")
    }


async def book(workflows: Workflows) -> str:
    """A settled two-member workflow: the author stores a resource and hands over."""
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"author-{t}", [
        ScriptStep(tool_calls=[{"name": "resource_put", "arguments": {"content": "chapter 1"}}]),
        ScriptStep(content="Stored chapter 1. @editor have a look."),
    ])  # fmt: skip
    llm.script(f"editor-{t}", [ScriptStep(content="Fine as it is.")])
    wf = await workflows.create("book", cast(t))
    await workflows.post(wf, "@author write chapter 1")
    await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 3)
    return wf


async def test_a_workflow_replays_to_the_same_decisions_and_runs(workflows: Workflows) -> None:
    t = workflows.tenant
    wf = await book(workflows)
    store = workflows.bus.store
    before = await store.last_position(t, "workflow", wf)

    record = await load_workflow(store, t, wf)
    agency = await store.read(t, "agency", workflows.agents.agency)
    replay = await replay_workflow(record, make_system(), agency_events=agency)

    assert replay.same, (replay.divergence, [c.same for c in replay.members.comparisons])
    assert replay.decisions_checked == 4  # two dispatches, two answers
    assert replay.members.compared > 0
    assert {who for who, _ in record.timeline()} == {"@workflow", "author", "editor"}
    seqs = [e.stream_seq for _, e in record.timeline()]
    assert seqs == sorted(seqs)
    # Replay writes nothing.
    assert await store.last_position(t, "workflow", wf) == before

    # A controller that would have prompted differently is caught at that decision.
    tampered = [_reprompted(e) for e in record.events]
    _, divergence = check_controller(dataclasses.replace(record, events=tuple(tampered)))
    assert divergence is not None
    assert divergence.recorded[0]["prompt"] == "something else"


async def test_a_member_created_before_its_blueprint_was_saved_replays_the_same(
    workflows: Workflows,
) -> None:
    """The registry handles a workflow's commands concurrently, so a member's thread may be
    created before its blueprint is saved (here made certain: the thread is created first).
    Its first run is accepted after both, and re-executes with the blueprint."""
    t, agency_id, store = workflows.tenant, workflows.agents.agency, workflows.bus.store
    wf = workflow_id(t, agency_id, "book")
    author = member_thread_id(t, wf, "author")
    blueprint = member_blueprint("book", "author", cast(t)["author"])
    await workflows.bus.commands.send(
        t,
        CreateThread(
            agency_id=agency_id,
            thread_id=author,
            agent_type=blueprint.name,
            request=workflow_request(wf, "author"),
        ),
        idempotency_key=f"wf-thread:{author}",
    )

    async def created() -> None:
        assert await store.read(t, "thread", author)

    await assert_eventually(created)
    assert await book(workflows) == wf

    record = await load_workflow(store, t, wf)
    agency = await store.read(t, "agency", agency_id)
    saved = next(
        e
        for e in agency
        if isinstance(e.payload, BlueprintSaved) and e.payload.blueprint.name == blueprint.name
    )
    created_at, accepted_at = (e.stream_seq for e in record.members["author"][:2])
    assert created_at < saved.stream_seq < accepted_at
    replay = await replay_workflow(record, make_system(), agency_events=agency)
    assert replay.same, [format_comparison(c) for c in replay.members.comparisons]
    assert replay.decisions_checked == 4


def _reprompted(event: RecordedEvent) -> RecordedEvent:
    if not isinstance(event.payload, MemberInvoked):
        return event
    payload = msgspec.structs.replace(event.payload, prompt="something else")
    envelope = msgspec.structs.replace(event.envelope, payload=payload)
    return dataclasses.replace(event, envelope=envelope)


async def agency(*argv: str) -> tuple[int, str, str]:
    """An `agency workflow …` command run in this event loop, with what it printed."""
    parser = argparse.ArgumentParser(prog="agency")
    workflow_cmd.register(parser.add_subparsers(dest="group", required=True))
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    with capture_logs(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status: int = await args.handler(args)
    return status, out.getvalue(), err.getvalue()


async def test_agency_workflow_replay_prints_the_history_and_re_executes_it(
    workflows: Workflows, nats_url: str, tmp_path: Path
) -> None:
    """Straight from the log: no API and no database is asked."""
    wf = await book(workflows)
    t, agency_id = workflows.tenant, workflows.agents.agency
    write_endpoints(
        tmp_path,
        Endpoints(pid=os.getpid(), nats_url=nats_url, database_url="unused", tenant_id=t),
    )
    d = str(tmp_path)
    record = await load_workflow(workflows.bus.store, t, wf)

    status, out, err = await agency("workflow", "replay", "@book", "--agency", agency_id,
                                    "--data-dir", d)  # fmt: skip
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"# workflow @book {wf}, {len(record.events)} events"
    assert lines[1].startswith("# members: @author (thread ")
    shown = [
        (e.envelope.aggregate_id, e.seq) for _, e in record.timeline() if e.type != "model.delta"
    ]
    assert len(lines) - 2 == len(shown)
    # The channel in order, each message with its hop and sender, interleaved with the runs.
    posted = [line.split("channel.message_posted")[1].strip() for line in lines
              if " channel.message_posted " in line]  # fmt: skip
    assert posted == [
        "hop 0 [@user] @author write chapter 1",
        "hop 1 [@author] Stored chapter 1. @editor have a look.",
        "hop 2 [@editor] Fine as it is.",
    ]
    kinds = [tuple(line.split()[1:4:2]) for line in lines[2:]]  # (who, type)
    assert kinds.index(("@workflow", "member.invoked")) < kinds.index(("author", "run.started"))
    assert kinds.index(("author", "run.completed")) < kinds.index(("@workflow", "member.answered"))
    assert any("resource_put" in line and line.split()[1] == "author" for line in lines)

    status, out, err = await agency("workflow", "replay", wf, "--json", "--data-dir", d)
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["aggregateId"], r["seq"]) for r in rows] == shown
    assert [r["streamSeq"] for r in rows] == sorted(r["streamSeq"] for r in rows)
    assert {r["who"] for r in rows} == {"@workflow", "author", "editor"}

    same = ["--re-execute", "--app", "tests.replay.apps:recorded", "--data-dir", d]
    status, out, err = await agency("workflow", "replay", wf, *same)
    assert status == 0, out + err
    assert out.splitlines()[0] == "controller: same: 4 decisions decided again"
    assert out.splitlines()[-1].startswith("same: 4 decisions and ")
    # Code that changed since the run was recorded: the member threads diverge.
    changed = [
        "--re-execute",
        "--app",
        "tests.workflows.apps:with_audit",
        "--json",
        "--data-dir",
        d,
    ]
    status, out, err = await agency("workflow", "replay", wf, *changed)
    assert status == 1, out + err
    report = json.loads(out)
    assert report["controller"] == {"decisions": 4, "same": True}
    assert report["same"] is False and not report["members"]["same"]
    assert any("divergence" in thread for thread in report["members"]["threads"])

    status, _, err = await agency("workflow", "replay", "@nosuch", "--agency", agency_id,
                                  "--data-dir", d)  # fmt: skip
    assert status == 2 and err.startswith("agency: no workflow @nosuch in the log of tenant")
