"""The workflows read model: workflows and members, the channel paged, inboxes, documents,
proposals and schedules, for one tenant only, and the same rows after a rebuild."""

from __future__ import annotations

import asyncpg

from agency.contracts.commands import SetSchedule
from agency.contracts.events import BlueprintSpec
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.projections import workflow_queries as q
from agency.projections.checksum import projection_checksum
from agency.projections.engine import LIVE_SCHEMA, ensure_tables
from agency.projections.readmodels.workflows import PROJECTION
from agency.projections.rebuild import rebuild
from agency.services.llm.fake_scripts import ScriptStep
from tests.helpers import assert_eventually
from tests.projections.conftest import RunProjection, pool, run_projection
from tests.workflows.conftest import Workflows

__all__ = ["pool", "run_projection"]


def tool(name: str, **arguments: object) -> ScriptStep:
    return ScriptStep(tool_calls=[{"name": name, "arguments": arguments}])


async def test_the_read_model_follows_a_workflow_and_rebuilds_the_same(
    workflows: Workflows, pool: asyncpg.Pool, run_projection: RunProjection, bus: Bus
) -> None:
    t, agency = workflows.tenant, workflows.agents.agency
    llm = workflows.agents.llm
    llm.script(f"chair-{t}", [
        tool("team_doc_write", path="agenda.md", content="1. ship"),
        tool("proposal_open", title="Ship?", options=["yes", "no"], voters=["chair", "member"]),
        tool("proposal_vote", choice="yes"),
        ScriptStep(content="Agenda written; @member please vote."),
    ])  # fmt: skip
    llm.script(f"member-{t}", [tool("proposal_vote", choice="no"), ScriptStep(content="Voted.")])
    wf = await workflows.create(
        "board",
        {n: BlueprintSpec(name=n, prompt=f"Your script is {n}-{t}.") for n in ("chair", "member")},
        tag="q4",
    )
    await workflows.post(wf, "@chair open the meeting")
    await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 3)
    schedule = "sch_" + new_id()
    await bus.commands.send(
        t,
        SetSchedule(
            agency_id=agency, schedule_id=schedule, name="weekly", cron="0 9 * * 1",
            target="workflow", workflow_id=wf, message="@chair weekly meeting",
        ),
    )  # fmt: skip
    async with pool.acquire() as conn:  # as the app does at start
        await ensure_tables(conn, PROJECTION, LIVE_SCHEMA)
    await run_projection(PROJECTION)

    async def projected() -> list[q.WorkflowView]:
        async with pool.acquire() as conn:
            views = await q.list_workflows(conn, t, agency)
            assert views and views[0].message_count == 3
            assert await q.schedules(conn, t, agency)
            return views

    [view] = await assert_eventually(projected, timeout=20)
    assert (view.name, view.tag, view.status, view.id) == ("board", "q4", "running", wf)
    assert [(m.name, m.status, m.runs) for m in view.members] == [
        ("chair", "idle", 1), ("member", "idle", 1)
    ]  # fmt: skip
    async with pool.acquire() as conn:
        first = await q.channel_page(conn, t, wf, limit=2)
        rest = await q.channel_page(conn, t, wf, after_seq=first.messages[-1].seq)
        inbox = await q.channel_page(conn, t, wf, mention="member")
        docs = await q.documents(conn, t, wf)
        [proposal] = await q.proposals(conn, t, wf)
        [sched] = await q.schedules(conn, t, agency)
        # Another tenant sees none of it.
        assert await q.list_workflows(conn, "t-other", agency) == []
        assert (await q.channel_page(conn, "t-other", wf)).messages == []
    assert [m.sender for m in first.messages] == ["user", "chair"] and first.has_more
    assert [m.sender for m in rest.messages] == ["member"] and not rest.has_more
    assert [m.content for m in inbox.messages] == ["Agenda written; @member please vote."]
    assert [(d.path, d.content, d.author) for d in docs] == [("agenda.md", "1. ship", "chair")]
    assert proposal.status == "closed" and proposal.outcome == ""  # one yes, one no: a tie
    assert proposal.votes == {"chair": "yes", "member": "no"}
    assert proposal.tally == {"yes": 1, "no": 1}
    assert (sched.id, sched.cron, sched.active, sched.fired) == (schedule, "0 9 * * 1", True, 0)

    async with pool.acquire() as conn:
        before = await projection_checksum(conn, PROJECTION)
    await rebuild(pool, bus.js, PROJECTION)
    async with pool.acquire() as conn:
        after = await projection_checksum(conn, PROJECTION)
    assert before == after
