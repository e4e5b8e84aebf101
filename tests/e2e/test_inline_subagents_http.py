"""Seed 000's inline subagent blueprints end to end over HTTP: saved as the seed writes
them, spawned by `task`, the child's `/state` showing the inline blueprint's tools."""

from __future__ import annotations

from agency.services.llm.fake_scripts import ScriptStep, ScriptToolCall
from tests.e2e.conftest import Client

# Seed 000: `SubagentsConfig = { subagents?: { subagents: AgentBlueprint[] } }`.
MANAGER = {
    "name": "manager-agent",
    "description": "Delegates.",
    "prompt": "You delegate.",
    "tags": ["default"],
    "config": {
        "subagents": {
            "subagents": [
                {
                    "name": "security-agent",
                    "description": "Analyzes security logs.",
                    "prompt": "You are a security analyst.",
                    "tags": ["lookup"],
                    "model": "openai:gpt-4.1-mini",
                }
            ]
        }
    },
}


async def test_a_task_child_of_an_inline_blueprint_shows_its_tools(client: Client) -> None:
    r = await client.http.post(f"/agency/{client.agency}/blueprints", json=MANAGER)
    assert r.status_code == 201, r.text
    key = "inline-http-" + client.agency
    task = ScriptToolCall(
        name="task",
        arguments={"description": f"Analyze top IPs {key}", "subagentType": "security-agent"},
    )
    client.llm.script(key, [ScriptStep(tool_calls=(task,)), ScriptStep(content="done")])
    client.llm.script(f"Analyze top IPs {key}", [ScriptStep(content="3 IPs")])
    parent = await client.thread("manager-agent")
    await client.invoke(parent, key)
    state = await client.until(
        parent,
        lambda s: s["run"]["status"] == "completed" and bool(s["state"]["children"]),
    )
    (child,) = state["state"]["children"]
    assert child["title"] == "Analyzes security logs." and child["status"] == "completed"
    child_state = await client.state(child["reference"])
    assert child_state["state"]["agentType"] == "security-agent"
    # The inline blueprint's tags pick its tools (`lookup`), not those of another.
    assert [t["name"] for t in child_state["state"]["tools"]] == ["lookup", "lookup_guarded"]
