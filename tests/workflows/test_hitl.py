"""A member is a runtime thread: a tool call held for approval pauses the workflow's member
until a person decides, and the workflow goes on from there."""

from __future__ import annotations

from agency.contracts.commands import ApproveToolCalls
from agency.contracts.events import BlueprintSpec
from agency.contracts.events.blueprint import BlueprintConfig, HitlConfig
from agency.services.llm.fake_scripts import ScriptStep
from tests.workflows.conftest import Workflows


async def test_an_approval_inside_a_workflow(workflows: Workflows) -> None:
    t = workflows.tenant
    workflows.agents.llm.script(f"careful-{t}", [
        ScriptStep(tool_calls=[{"name": "team_doc_write",
                                "arguments": {"path": "plan.md", "content": "the plan"}}]),
        ScriptStep(content="The plan is written."),
    ])  # fmt: skip
    careful = BlueprintSpec(
        name="careful",
        prompt=f"Your script is careful-{t}.",
        tags=("hitl",),
        config=BlueprintConfig(hitl=HitlConfig(tools=("team_doc_write",))),
    )
    wf = await workflows.create("guarded", {"careful": careful})
    await workflows.post(wf, "@careful write the plan")
    thread = (await workflows.state(wf)).members["careful"].thread_id
    await workflows.agents.wait_for(thread, lambda es: "hitl.interrupt" in [e.type for e in es])
    state = await workflows.state(wf)
    assert "careful" in state.active and not state.settled and not state.documents

    await workflows.bus.commands.send(
        t,
        ApproveToolCalls(agency_id=workflows.agents.agency, thread_id=thread, approved=True),
    )
    state = await workflows.wait(wf, lambda s: s.settled and len(s.messages) == 2)
    assert state.documents["plan.md"] == ("the plan", "careful")
    assert state.messages[-1].content == "The plan is written."
