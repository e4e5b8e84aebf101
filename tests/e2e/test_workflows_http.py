"""Workflows over HTTP: a YAML definition, `/run` streamed, `/serve`, the channel and the
other read models, schedules, and clear errors for bad input."""

from __future__ import annotations

import json
from typing import Any

from agency.services.llm.fake_scripts import ScriptStep
from tests.e2e.conftest import Client
from tests.helpers import assert_eventually

DEFINITION = """
name: review
agents:
  writer:
    system_prompt: You write for ${{ env.TEAM }}.
  reviewer: worker
kickoff: "@writer write about ${{ inputs.topic }}"
limits: {max_hops: 5}
"""


async def sse(client: Client, path: str, body: dict[str, Any]) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    async with client.http.stream("POST", path, json=body, timeout=60) as r:
        assert r.status_code == 200, await r.aread()
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                events.append((event, json.loads(line.removeprefix("data:").strip())))
    return events


async def test_a_definition_runs_over_http_with_the_channel_streamed(client: Client) -> None:
    key = "wfhttp-" + client.agency
    client.llm.script(f"write about {key}", [
        ScriptStep(tool_calls=[{"name": "team_doc_write",
                                "arguments": {"path": "post.md", "content": "words"}}]),
        ScriptStep(content=f"Here it is. @reviewer please check post.md of {key}"),
    ])  # fmt: skip
    client.llm.script(f"check post.md of {key}", [ScriptStep(content="Looks right.")])
    r = await client.http.post(
        f"/agency/{client.agency}/workflows",
        json={"definition": DEFINITION, "tag": "pr-7", "inputs": {"topic": key},
              "env": {"TEAM": "docs"}},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["members"] == ["writer", "reviewer"] and created["tag"] == "pr-7"
    assert created["kickoff"] == f"@writer write about {key}"

    events = await sse(
        client, "/run", {"workflow": "review", "tag": "pr-7", "message": created["kickoff"]}
    )
    kinds = [k for k, _ in events]
    assert kinds[-1] == "done" and events[-1][1]["status"] == "settled"
    assert events[-1][1]["content"] == "Looks right."
    assert events[-1][1]["usage"]["outputTokens"] > 0
    assert ("tool_call", {"agent": "writer", "tool": "team_doc_write",
                          "args": {"path": "post.md", "content": "words"}}) in events  # fmt: skip
    chunks = "".join(d["text"] for k, d in events if k == "chunk" and d["agent"] == "writer")
    assert "@reviewer please check post.md" in chunks
    senders = [d["sender"] for k, d in events if k == "message"]
    assert senders == ["user", "writer", "reviewer"]

    base = f"/agency/{client.agency}/workflows/review:pr-7"

    async def projected() -> dict[str, Any]:
        r = await client.http.get(f"{base}/channel", params={"limit": 2})
        assert r.status_code == 200, r.text
        page: dict[str, Any] = r.json()
        assert len(page["messages"]) == 2 and page["hasMore"] is True
        return page

    page = await assert_eventually(projected, timeout=15)
    assert [m["sender"] for m in page["messages"]] == ["user", "writer"]
    # A position beyond what a channel can hold is refused, not a server error.
    r = await client.http.get(f"{base}/channel", params={"afterSeq": 2**31})
    assert r.status_code == 400, r.text
    r = await client.http.get(f"{base}/channel", params={"afterSeq": page["messages"][-1]["seq"]})
    assert [m["sender"] for m in r.json()["messages"]] == ["reviewer"]
    assert r.json()["hasMore"] is False
    r = await client.http.get(f"{base}/inbox/reviewer")
    assert [m["sender"] for m in r.json()["messages"]] == ["writer"]
    r = await client.http.get(f"{base}/documents")
    assert [(d["path"], d["author"]) for d in r.json()] == [("post.md", "writer")]
    r = await client.http.get(base)
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["status"] == "running" and view["messageCount"] == 3
    assert {m["name"]: m["runs"] for m in view["members"]} == {"reviewer": 1, "writer": 1}
    r = await client.http.get(f"/agency/{client.agency}/workflows")
    assert [w["name"] for w in r.json()] == ["review"]


async def test_serve_answers_an_agent_in_global_as_json(client: Client) -> None:
    key = "serve-" + client.agency
    client.llm.script(key, [ScriptStep(content="forty-two")])
    r = await client.http.post("/serve", json={"agent": "worker", "message": f"answer {key}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content"] == "forty-two" and body["status"] == "settled"
    assert [m["sender"] for m in body["messages"]] == ["user", "worker"]
    assert body["usage"]["inputTokens"] > 0 and body["toolCalls"] == []
    r = await client.http.get(f"/agency/{client.agency}/workflows/global")
    assert r.status_code == 200, r.text
    assert [m["name"] for m in r.json()["members"]] == ["worker"]


async def test_bad_definitions_and_bodies_get_clear_errors(client: Client) -> None:
    path = f"/agency/{client.agency}/workflows"
    cases = [
        ({"definition": "agents: [unclosed"}, "not valid YAML"),
        ({"definition": "agents:\n  a: worker"}, "workflow name '' must be"),
        ({"definition": "name: x\nagents:\n  a: {system_prompt: '${{ env.NOPE }}'}"},
         "${{ env.NOPE }} is not set"),
        ({"definition": "name: x\nagents:\n  a: {prompt: hi}"}, "unknown keys prompt"),
        ({"definition": "name: x\nagents:\n  a: worker\ntriggers: [{cron: 'soon'}]"},
         "must have 5 fields"),
        ({"definition": "name: x\nagents:\n  a: {system_prompt_file: p/a.md}"},
         "agents.a.system_prompt_file: 'p/a.md' was not sent with the definition"),
        ({"definition": "name: x\nagents:\n  a: {system_prompt_file: a.md, system_prompt: hi}",
          "files": {"a.md": "hello"}}, "system_prompt and system_prompt_file are exclusive"),
        ({"definition": "name: x\nagents:\n  a: {system_prompt_file: a.md}",
          "files": {"a.md": "for ${{ env.NOPE }}"}}, "${{ env.NOPE }} is not set"),
        ({"definition": "name: x\nagents:\n  a: {system_prompt_file: '${{ env.P }}.md'}",
          "env": {"P": "a"}, "files": {"a.md": "hi"}}, "the path is taken as written"),
        ({"definition": "name: x\nagents:\n  a: {system_prompt: hi, model: 'acme:m1'}"},
         "agents.a.model: unknown model provider 'acme'"),
        # YAML keys that are not text (a number, a boolean, null), at any level.
        ({"definition": "name: x\nagents:\n  a: worker\n1: 2"},
         "definition: key 1 is a int, not text"),
        ({"definition": "name: x\nagents:\n  a: {true: hi}"},
         "definition.agents.a: key True is a bool, not text"),
        ({"definition": "name: x\nagents:\n  a: worker\nlimits: {~: 2}"},
         "definition.limits: key None is a NoneType, not text"),
        ({"definition": "name: x\nagents:\n  a: worker\ntriggers: [{cron: '0 * * * *', 1: x}]"},
         "definition.triggers[0]: key 1 is a int, not text"),
    ]  # fmt: skip
    # A well-formed definition naming a blueprint the agency does not have: not found.
    r = await client.http.post(path, json={"definition": "name: x\nagents:\n  a: nosuchblueprint"})
    assert r.status_code == 404 and "no blueprint 'nosuchblueprint'" in r.json()["error"]
    for body, message in cases:
        r = await client.http.post(path, json=body)
        assert r.status_code == 400, r.text
        assert message in r.json()["error"], r.json()
    r = await client.http.post("/run", json={"agent": "worker", "workflow": "x", "message": "m"})
    assert r.status_code == 400 and "exactly one" in r.json()["error"]
    r = await client.http.post("/serve", json={"workflow": "missing", "message": "m"})
    assert r.status_code == 404, r.text
    r = await client.http.post(
        f"/agency/{client.agency}/schedules",
        json={"name": "n", "cron": "99 * * * *", "message": "m", "agent": "worker"},
    )
    assert r.status_code == 400 and "not a valid cron" in r.json()["error"]


async def test_a_prompt_file_sent_with_the_definition_becomes_the_members_prompt(
    client: Client,
) -> None:
    definition = "name: filed\nagents:\n  writer: {system_prompt_file: prompts/w.md}\n"
    files = {"prompts/w.md": "You write for ${{ env.TEAM }} about ${{ inputs.topic }}."}
    r = await client.http.post(
        f"/agency/{client.agency}/workflows",
        json={"definition": definition, "files": files, "env": {"TEAM": "ops"},
              "inputs": {"topic": "logs"}},
    )  # fmt: skip
    assert r.status_code == 201, r.text
    prompt = await member_prompt(client, "filed", "writer")
    assert prompt.endswith("\n\nYou write for ops about logs."), prompt


async def member_prompt(client: Client, workflow: str, member: str) -> str:
    """A member's prompt as saved: a preamble saying who it is, then the definition's."""

    async def in_read_model() -> Any:
        r = await client.http.get(f"/agency/{client.agency}/workflows/{workflow}")
        assert r.status_code == 200, r.text
        return r.json()

    view = await assert_eventually(in_read_model, timeout=15)
    name = next(m["agentType"] for m in view["members"] if m["name"] == member)
    r = await client.http.get(f"/agency/{client.agency}/blueprints")
    prompt = next(b["prompt"] for b in r.json() if b["name"] == name)
    assert isinstance(prompt, str)
    return prompt


async def test_schedules_are_listed(client: Client) -> None:
    r = await client.http.post(
        f"/agency/{client.agency}/schedules",
        json={"name": "daily", "cron": "0 9 * * *", "message": "@worker report", "agent": "worker"},
    )
    assert r.status_code == 202, r.text

    async def listed() -> list[dict[str, Any]]:
        r = await client.http.get(f"/agency/{client.agency}/schedules")
        rows: list[dict[str, Any]] = r.json()
        assert [s["name"] for s in rows] == ["daily"]
        return rows

    [row] = await assert_eventually(listed, timeout=15)
    assert row["cron"] == "0 9 * * *" and row["target"] == "agent" and row["active"] is True


async def test_serve_with_inline_agents_addresses_them_all(client: Client) -> None:
    key = "inline-" + client.agency
    client.llm.script(f"ideas {key}", [ScriptStep(content="three ideas")])
    body = {
        "agents": {"thinker": {"system_prompt": f"You have ideas {key}.", "max_steps": 3}},
        "message": "What should we build?",
    }
    r = await client.http.post("/serve", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["content"] == "three ideas" and answer["status"] == "settled"
    assert [m["sender"] for m in answer["messages"]] == ["user", "thinker"]
    assert answer["messages"][0]["mentions"] == ["thinker"]
    r = await client.http.post("/serve", json={"agents": {"x": {"prompt": "p"}}, "message": "m"})
    assert r.status_code == 400 and "unknown field `prompt`" in r.json()["error"]


async def test_a_schedule_runs_an_agent_in_global(client: Client) -> None:
    key = "cron-agent-" + client.agency
    client.llm.script(key, [ScriptStep(content=f"pong {i}") for i in range(50)])
    r = await client.http.post(
        f"/agency/{client.agency}/schedules",
        json={"name": "pinger", "cron": "* * * * * *", "message": f"ping {key}", "agent": "worker"},
    )
    assert r.status_code == 202, r.text
    schedule = r.json()["id"]

    async def answered() -> list[dict[str, Any]]:
        r = await client.http.get(f"/agency/{client.agency}/workflows/global/channel")
        messages: list[dict[str, Any]] = r.json()["messages"]
        senders = [m["sender"] for m in messages]
        assert "schedule:pinger" in senders and "worker" in senders
        return messages

    messages = await assert_eventually(answered, timeout=30)
    fired = next(m for m in messages if m["sender"] == "schedule:pinger")
    assert fired["content"] == f"ping {key}" and fired["mentions"] == ["worker"]
    r = await client.http.post(f"/agency/{client.agency}/schedules/{schedule}/remove")
    assert r.status_code == 202, r.text

    async def removed() -> None:
        r = await client.http.get(f"/agency/{client.agency}/schedules")
        [row] = [s for s in r.json() if s["id"] == schedule]
        assert row["active"] is False and row["fired"] >= 1

    await assert_eventually(removed, timeout=15)


async def test_a_definition_as_an_object_creates_the_same_workflow_as_its_yaml(
    client: Client,
) -> None:
    path = f"/agency/{client.agency}/workflows"
    document = {
        "name": "review-object",
        "agents": {
            "writer": {"system_prompt": "You write for ${{ env.TEAM }}.", "max_steps": 3},
            "reviewer": "worker",
            "checker": {"blueprint": "worker"},
        },
        "kickoff": "@writer write about ${{ inputs.topic }}",
        "triggers": [{"cron": "0 9 * * 1-5"}],
        "limits": {"max_hops": 5},
    }
    body = {"definition": document, "inputs": {"topic": "x"}, "env": {"TEAM": "docs"}}
    r = await client.http.post(path, json=body)
    assert r.status_code in (201, 202), r.text
    created = r.json()
    assert created["members"] == ["writer", "reviewer", "checker"]
    assert (created["kickoff"], created["schedules"]) == ("@writer write about x", 1)

    cases = [
        ({**document, "agents": {"a": {"blueprint": "worker", "model": "m"}}}, "agents"),
        ({**document, "limits": {"max_hops": True}}, "definition.limits.max_hops"),
        ({**document, "triggers": [{"cron": "0 9 * * mon"}]}, "not a valid cron"),
        ({**document, "agents": {"a": {"system_prompt_file": "a.md"}}},
         "unknown field `system_prompt_file`"),
        ({**document, "agents": {"user": "worker"}}, "not 'user' or 'system'"),
    ]  # fmt: skip
    for definition, message in cases:
        r = await client.http.post(path, json={**body, "definition": definition})
        assert r.status_code == 400, r.text
        assert message in r.json()["error"], r.json()
    r = await client.http.post("/run", json={"agents": {"a": {"model": 3}}, "message": "m"})
    assert r.status_code == 400 and "agents" in r.json()["error"] and "model" in r.json()["error"]


async def test_a_schedule_past_the_tenants_limit_is_refused_with_the_limit_named(
    client: Client,
) -> None:
    path = f"/agency/{client.agency}/schedules"
    body = {"cron": "0 9 * * 1", "agent": "worker", "message": "weekly"}
    added = []
    for n in range(20):  # the documented AGENCY_TENANT_MAX_SCHEDULES
        r = await client.http.post(path, json={**body, "name": f"weekly-{n}"})
        assert r.status_code == 202, r.text
        added.append(r.json()["id"])
    r = await client.http.post(path, json={**body, "name": "one-too-many"})
    assert r.status_code == 409, r.text
    assert "tenant_schedule_limit" in r.text and "the limit is 20" in r.text
    r = await client.http.post(f"{path}/{added[0]}/remove")
    assert r.status_code == 202, r.text

    async def room_again() -> None:
        r = await client.http.post(path, json={**body, "name": "in-its-place"})
        assert r.status_code == 202, r.text

    await assert_eventually(room_again, timeout=15)
