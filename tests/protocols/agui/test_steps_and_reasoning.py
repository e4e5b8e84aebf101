"""Subagents as AG-UI steps and the model's reasoning as AG-UI reasoning events, read by
`@ag-ui/client`'s HttpAgent (which checks every step is closed before the run ends)."""

from __future__ import annotations

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.protocols.agui.conftest import Tenant, text_of, types


async def test_a_subagent_still_working_when_the_run_ends_has_its_step_finished(
    tenant: Tenant,
) -> None:
    """A child spawned without blocking outlives its parent's run; the step closes with it."""
    key, child = f"agui-bg-{tenant.agency}", f"agui-bg-kid-{tenant.agency}"
    task = ScriptToolCall(
        name="task", arguments={"description": child, "subagentType": "background"}
    )
    tenant.llm.script(key, [ScriptStep(tool_calls=(task,)), ScriptStep(content="started it")])
    tenant.llm.script(child, [ScriptStep(content="later", delay_ms=5000)])
    got = await tenant.client("manager", [{"user": f"{key}: start in the background"}])
    (turn,) = got["turns"]
    assert turn["error"] is None, turn["error"]
    events = turn["events"]
    kinds = types(events)
    (started,) = [e for e in events if e["type"] == "STEP_STARTED"]
    (finished,) = [e for e in events if e["type"] == "STEP_FINISHED"]
    assert started["stepName"] == finished["stepName"]
    assert started["stepName"].startswith("subagent background ")
    assert kinds.index("STEP_STARTED") < kinds.index("STEP_FINISHED") < kinds.index("RUN_FINISHED")
    assert text_of(events) == "started it"


async def test_the_models_reasoning_is_a_reasoning_message(tenant: Tenant) -> None:
    key = f"agui-think-{tenant.agency}"
    thought = "The user wants a fruit; figs are in season."
    tenant.llm.script(key, [ScriptStep(reasoning=thought, content="figs")])
    got = await tenant.client("worker", [{"user": f"{key}: name a fruit"}])
    (turn,) = got["turns"]
    assert turn["error"] is None, turn["error"]
    events = turn["events"]
    kinds = types(events)
    reasoning = [e for e in events if e["type"].startswith("REASONING_")]
    assert [e["type"] for e in reasoning] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    ]
    assert len({e["messageId"] for e in reasoning}) == 1
    assert reasoning[1]["role"] == "reasoning"
    assert "".join(e["delta"] for e in reasoning if "delta" in e) == thought
    assert kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_END")
    assert text_of(events) == "figs"
    # The client keeps the reasoning as a message of its own beside the answer.
    assert ("reasoning", thought) in [(m["role"], m["content"]) for m in got["messages"]]
    assert ("assistant", "figs") in [(m["role"], m["content"]) for m in got["messages"]]


async def test_an_answer_without_reasoning_has_no_reasoning_events(tenant: Tenant) -> None:
    key = f"agui-plain-{tenant.agency}"
    tenant.llm.script(key, [ScriptStep(content="plain")])
    got = await tenant.client("worker", [{"user": f"{key}: hi"}])
    kinds = types(got["turns"][0]["events"])
    assert not [k for k in kinds if k.startswith("REASONING_")]
