"""A member whose thread was deleted: the workflow says so on its channel and goes on."""

from __future__ import annotations

from agency.contracts.events import BlueprintSpec, MemberAnswered
from agency.services.llm.fake_scripts import ScriptStep
from agency.services.threads.erasure import delete_tree
from tests.workflows.conftest import Workflows

GONE = "its thread was deleted"


def member(marker: str) -> BlueprintSpec:
    return BlueprintSpec(name=marker.split("-")[0], prompt=f"Your script is {marker}.")


async def test_a_mention_of_a_deleted_member_is_answered_and_the_others_still_run(
    workflows: Workflows,
) -> None:
    t = workflows.tenant
    llm = workflows.agents.llm
    llm.script(f"writer-{t}", [ScriptStep(content="Written.")])
    llm.script(f"reviewer-{t}", [ScriptStep(content="Reviewed.")])
    wf = await workflows.create(
        "pair", {name: member(f"{name}-{t}") for name in ("writer", "reviewer")}
    )
    await workflows.post(wf, "@writer write")
    state = await workflows.wait(wf, lambda s: len(s.messages) == 2 and s.settled)
    writer = state.members["writer"].thread_id
    await delete_tree(workflows.bus, t, writer, [writer], "test")

    await workflows.post(wf, "@writer again")
    state = await workflows.wait(wf, lambda s: len(s.messages) == 4 and s.settled)
    said = state.messages[-1]
    assert said.sender != "writer" and GONE in said.content, said
    answers = [
        e.payload
        for e in await workflows.history(wf)
        if isinstance(e.payload, MemberAnswered) and e.payload.member == "writer"
    ]
    assert [(a.outcome, a.error) for a in answers] == [("completed", ""), ("canceled", GONE)]

    await workflows.post(wf, "@reviewer review")
    state = await workflows.wait(wf, lambda s: len(s.messages) == 6 and s.settled)
    assert (state.messages[-1].sender, state.messages[-1].content) == ("reviewer", "Reviewed.")
