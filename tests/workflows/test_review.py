"""Three agents review a draft, driven only by mentions on the channel."""

from __future__ import annotations

from collections import Counter

from agency.contracts.events import BlueprintSpec, MemberAnswered, MemberInvoked
from agency.contracts.events.run import RUN_TERMINAL_TYPES
from agency.services.llm.fake_scripts import ScriptStep
from tests.workflows.conftest import Workflows


def member(marker: str) -> BlueprintSpec:
    return BlueprintSpec(name=marker.split("-")[0], prompt=f"Your script is {marker}.")


async def test_writer_reviewer_approver_take_turns_by_mention(workflows: Workflows) -> None:
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"writer-{t}", [
        ScriptStep(tool_calls=[{"name": "team_doc_write",
                                "arguments": {"path": "draft.md", "content": "roses are red"}}]),
        ScriptStep(content="The draft is in draft.md. @reviewer please review."),
        ScriptStep(content="Added a title. @reviewer"),
    ])  # fmt: skip
    llm.script(f"reviewer-{t}", [
        ScriptStep(content="It needs a title. @writer please fix."),
        ScriptStep(content="Good now. @approver please approve."),
    ])  # fmt: skip
    llm.script(f"approver-{t}", [ScriptStep(content="Approved.")])
    wf = await workflows.create(
        "review",
        {name: member(f"{name}-{t}") for name in ("writer", "reviewer", "approver")},
        tag="pr-1",
    )
    await workflows.post(wf, "@writer please write a poem")
    state = await workflows.wait(wf, lambda s: len(s.messages) == 6 and s.settled)

    assert [(m.sender, m.hop) for m in state.messages] == [
        ("user", 0), ("writer", 1), ("reviewer", 2), ("writer", 3), ("reviewer", 4),
        ("approver", 5),
    ]  # fmt: skip
    assert state.messages[-1].content == "Approved." and state.messages[-1].mentions == ()
    assert state.documents["draft.md"] == ("roses are red", "writer")
    # Each member ran once per batch of mentions and never twice at once.
    history = await workflows.history(wf)
    running: set[str] = set()
    for e in history:
        match e.payload:
            case MemberInvoked(member=name):
                assert name not in running, f"{name} invoked while running"
                running.add(name)
            case MemberAnswered(member=name):
                running.discard(name)
    invoked = Counter(e.payload.member for e in history if isinstance(e.payload, MemberInvoked))
    assert invoked == {"writer": 2, "reviewer": 2, "approver": 1}
    # Every member is a runtime thread with its own complete runs.
    for name, count in invoked.items():
        events = await workflows.agents.events(state.members[name].thread_id)
        assert [e.type for e in events if e.type in RUN_TERMINAL_TYPES] == ["run.completed"] * count
