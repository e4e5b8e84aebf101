"""A parent's child registry over HTTP: `/state` lists each child's entry (the seed's
SubagentRegistryEntry), filled from the call, the subagent entry and the child blueprint."""

from __future__ import annotations

from typing import Any

from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client


def call(tool: str, **arguments: object) -> dict[str, object]:
    return {"name": tool, "arguments": arguments}


def ended(state: dict[str, Any]) -> bool:
    return state["run"]["status"] in ("completed", "error", "canceled")


async def test_state_lists_each_child_with_its_registry_entry(client: Client) -> None:
    key = "registry-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[
            call("task", description=f"summarise {key}-w", subagentType="worker", title="Summary"),
            call("subagent_create", name="scribe", subagentType="helper",
                 message=f"take notes {key}-h", description="keeps the notes"),
        ]),
        ScriptStep(tool_calls=[
            call("subagent_create", name="envoy", subagentType="liaison", message=f"go {key}-l"),
        ]),
        ScriptStep(content="all delegated"),
    ])  # fmt: skip
    client.llm.script(f"{key}-w", [ScriptStep(content="the summary")])
    client.llm.script(f"{key}-h", [ScriptStep(content="noted")])
    client.llm.script(f"{key}-l", [ScriptStep(content="on my way")])
    parent = await client.thread("manager")
    await client.invoke(parent, key)
    state = await client.until(
        parent,
        lambda s: (
            ended(s)
            and len(s["state"]["children"]) == 3
            and s["state"]["children"][2]["status"] == "completed"
        ),
    )
    children = state["state"]["children"]
    # Children come in the order they were spawned: the two of one model step are spawned
    # at once, in either order, and the next step's child after them.
    by_name = {child["name"]: child for child in children}
    worker, helper, liaison = by_name["worker"], by_name["scribe"], by_name["envoy"]
    assert {c["name"] for c in children[:2]} == {"worker", "scribe"}
    assert children[2]["name"] == "envoy"
    expected_keys = {
        "reference", "name", "title", "description", "resumable", "blocking", "threadName",
        "spawnGroupId", "createdAt", "status", "parentCommunication", "subagentType", "state",
    }  # fmt: skip
    assert set(worker) == expected_keys
    assert worker["name"] == "worker" and worker["title"] == "Summary"
    assert worker["description"] == f"summarise {key}-w"
    assert (worker["resumable"], worker["blocking"]) == (False, True)
    assert worker["threadName"] == "worker" and worker["status"] == "completed"
    assert worker["parentCommunication"] == "implicit"
    assert helper["name"] == "scribe" and helper["threadName"] == "helper/scribe"
    assert helper["description"] == "keeps the notes" and helper["title"] is None
    assert (helper["resumable"], helper["blocking"]) == (True, True)
    # One model step spawned both: one group; the next step's child has its own.
    assert worker["spawnGroupId"] and worker["spawnGroupId"] == helper["spawnGroupId"]
    assert liaison["spawnGroupId"] and liaison["spawnGroupId"] != worker["spawnGroupId"]
    # No title in the call: the child blueprint's description is its title.
    assert liaison["title"] == "Works on its own and reports when it chooses."
    assert liaison["parentCommunication"] == "explicit"
    assert (liaison["resumable"], liaison["blocking"]) == (True, False)
    assert children[0]["createdAt"] <= children[1]["createdAt"] <= liaison["createdAt"]
    references = [c["reference"] for c in children]
    links = [link["childThreadId"] for link in state["state"]["subagents"]]
    assert sorted(references) == sorted(links)


async def test_state_shows_a_childs_status_text_then_terminated(client: Client) -> None:
    key = "registry-status-" + client.agency
    client.llm.script(key, [
        ScriptStep(tool_calls=[call("subagent_create", name="envoy", subagentType="liaison",
                                    message=f"go {key}-l")]),
        ScriptStep(content="delegated"),
    ])  # fmt: skip
    client.llm.script(f"{key}-l", [
        ScriptStep(tool_calls=[call("set_status", status="drafting the plan")]),
        ScriptStep(content="never finished", delay_ms=30_000),
    ])  # fmt: skip
    parent = await client.thread("manager")
    await client.invoke(parent, key)

    def entry(state: dict[str, Any]) -> dict[str, Any] | None:
        children = state["state"]["children"]
        return children[0] if children else None

    state = await client.until(
        parent, lambda s: (e := entry(s)) is not None and e["status"] == "drafting the plan"
    )
    child = entry(state)
    assert child is not None and child["state"] == "running"
    r = await client.http.post(f"{client.path(child['reference'])}/terminate")
    assert r.status_code == 202, r.text
    state = await client.until(
        parent, lambda s: (e := entry(s)) is not None and e["status"] == "terminated"
    )
    assert entry(state)["state"] == "terminated"  # type: ignore[index]
    child_state = await client.state(child["reference"])
    assert child_state["state"]["thread"]["status"] == "terminated"
    assert child_state["run"]["status"] == "canceled"
    assert child_state["run"]["reason"] == "terminated"
