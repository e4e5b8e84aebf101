"""Proposals, loop protection and retries of a workflow's members."""

from __future__ import annotations

from agency.contracts.events import BlueprintSpec, MemberAnswered, MemberInvoked, WorkflowLimits
from agency.services.llm.fake_scripts import ScriptStep
from tests.workflows.conftest import Workflows


def tool(name: str, **arguments: object) -> ScriptStep:
    return ScriptStep(tool_calls=[{"name": name, "arguments": arguments}])


def blueprint(marker: str) -> BlueprintSpec:
    return BlueprintSpec(name=marker.split("-")[0], prompt=f"Your script is {marker}.")


async def test_a_proposal_closes_when_every_voter_has_voted(workflows: Workflows) -> None:
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"lead-{t}", [
        tool("proposal_open", title="Ship it?", options=["yes", "no"], voters=["alice", "bob"]),
        ScriptStep(content="Please vote, @alice and @bob."),
    ])  # fmt: skip
    llm.script(f"alice-{t}", [tool("proposal_vote", choice="yes"), ScriptStep(content="voted")])
    llm.script(f"bob-{t}", [
        tool("proposal_vote", choice="yes", reason="tests pass"),
        tool("proposal_status"),
        ScriptStep(content="voted too"),
    ])  # fmt: skip
    wf = await workflows.create(
        "vote", {n: blueprint(f"{n}-{t}") for n in ("lead", "alice", "bob")}
    )
    await workflows.post(wf, "@lead decide whether we ship")
    state = await workflows.wait(
        wf, lambda s: s.settled and any(p.closed for p in s.proposals.values())
    )
    [proposal] = state.proposals.values()
    assert proposal.title == "Ship it?" and proposal.voters == ("alice", "bob")
    assert proposal.votes == {"alice": "yes", "bob": "yes"}
    assert proposal.outcome == "yes" and proposal.tally() == {"yes": 2, "no": 0}
    assert proposal.reasons["bob"] == "tests pass"
    senders = [m.sender for m in state.messages]
    assert senders[:2] == ["user", "lead"] and sorted(senders[2:]) == ["alice", "bob"]


async def test_answers_stop_at_the_hop_limit(workflows: Workflows) -> None:
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"ping-{t}", [ScriptStep(content=f"@pong ball {i}") for i in range(10)])
    llm.script(f"pong-{t}", [ScriptStep(content=f"@ping ball {i}") for i in range(10)])
    wf = await workflows.create(
        "loop",
        {n: blueprint(f"{n}-{t}") for n in ("ping", "pong")},
        limits=WorkflowLimits(max_hops=3),
    )
    await workflows.post(wf, "@ping serve")
    state = await workflows.wait(wf, lambda s: s.settled and len(s.messages) >= 5)
    assert [m.sender for m in state.messages] == ["user", "ping", "pong", "ping", "system"]
    assert "hop limit" in state.messages[-1].content
    assert state.status == "running"


async def test_a_run_over_the_message_limit_is_stopped(workflows: Workflows) -> None:
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"tick-{t}", [ScriptStep(content=f"@tock {i}") for i in range(10)])
    llm.script(f"tock-{t}", [ScriptStep(content=f"@tick {i}") for i in range(10)])
    wf = await workflows.create(
        "limit",
        {n: blueprint(f"{n}-{t}") for n in ("tick", "tock")},
        limits=WorkflowLimits(max_messages=4),
    )
    await workflows.post(wf, "@tick go")
    state = await workflows.wait(wf, lambda s: s.status == "stopped" and s.settled)
    assert [m.sender for m in state.messages] == ["user", "tick", "tock", "tick"]


async def test_a_failed_member_run_is_retried_with_backoff(workflows: Workflows) -> None:
    t = workflows.tenant
    workflows.agents.llm.script(
        f"flaky-{t}", [ScriptStep(content="worked the second time", status=400, times=1)]
    )
    wf = await workflows.create(
        "retry", {"flaky": blueprint(f"flaky-{t}")}, limits=WorkflowLimits(max_attempts=2)
    )
    await workflows.post(wf, "@flaky do it")
    state = await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 2)
    assert state.messages[-1].sender == "flaky"
    assert state.messages[-1].content == "worked the second time"
    history = await workflows.history(wf)
    attempts = [e.payload.attempt for e in history if isinstance(e.payload, MemberInvoked)]
    answers = [
        (e.payload.outcome, e.payload.retrying)
        for e in history
        if isinstance(e.payload, MemberAnswered)
    ]
    assert attempts == [1, 2]
    assert answers == [("error", True), ("completed", False)]
