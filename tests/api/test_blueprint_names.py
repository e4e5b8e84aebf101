"""A blueprint that comes in over HTTP (saved, a workflow's inline member, an inline
subagent of either) must name what the agent system has: its tags and hooks. An unknown
one is a 400 naming it and listing what exists, never silently nothing; the OpenAPI
document lists the tags and middleware ids a blueprint may give. A `hitl.tools` name that
is none of the blueprint's tools (which no schema can list) is taken, and the answer warns
of it, listing the tools the blueprint has."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from agency.infra.jetstream.connection import Bus
from agency.services.workflows.http.ops import CREATE_WAIT
from tests.api.conftest import Tenant, create_agency

TAGS = "(the tags of this agent system: counted, hitl)"
MIDDLEWARE = "(the middleware of this agent system: broken_state, hitl, message_counter)"


async def save(
    client: httpx.AsyncClient, tenant: Tenant, agency_id: str, spec: dict[str, object]
) -> httpx.Response:
    return await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant.auth)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"tags": ["counted", "wether"]},
                     f"field 'tags': unknown tag 'wether' {TAGS}",
                     id="unknown-tag"),
        pytest.param({"hooks": ["audit"]},
                     f"field 'hooks': no middleware 'audit' {MIDDLEWARE}",
                     id="unknown-hook"),
        pytest.param({"config": {"subagents": {"subagents": [
                         "worker", {"name": "scout", "prompt": "Look.", "tags": ["wether"]}]}}},
                     f"field 'config.subagents.subagents[1].tags': unknown tag 'wether' {TAGS}",
                     id="inline-subagent-tag"),
        pytest.param({"config": {"subagents": {"subagents": [
                         {"name": "scout", "hooks": ["audit"]}]}}},
                     f"field 'config.subagents.subagents[0].hooks': no middleware 'audit' "
                     f"{MIDDLEWARE}",
                     id="inline-subagent-hook"),
    ],
)  # fmt: skip
async def test_a_name_the_system_does_not_have_is_refused_listing_what_exists(
    client: httpx.AsyncClient, tenant_a: Tenant, spec: dict[str, object], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, {"name": "misnamed", **spec})
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"tags": ["counted"], "config": {"hitl": {"tools": ["ecko"]}}},
                     "field 'config.hitl.tools': 'ecko' is no tool of this blueprint (its tools: "
                     "echo, notify_parent, set_status)",
                     id="unknown-hitl-tool"),
        pytest.param({"config": {"hitl": {"tools": ["sendmail"]},
                                 "mcpServers": [{"name": "mail", "url": "http://mail/mcp"}]}},
                     "'sendmail' is no tool of this blueprint (its tools: notify_parent, "
                     "set_status, mail__<tool>)",
                     id="hitl-tool-not-of-the-mcp-server"),
        pytest.param({"config": {"subagents": {"subagents": [
                         {"name": "scout", "tags": ["counted"],
                          "config": {"subagents": {"subagents": [
                              {"name": "deep", "config": {"hitl": {"tools": ["ecko"]}}}]}}}]}}},
                     "field 'config.subagents.subagents[0].config.subagents.subagents[0]."
                     "config.hitl.tools': 'ecko' is no tool of this blueprint (its tools: "
                     "notify_parent, set_status)",
                     id="nested-inline-subagent-hitl-tool"),
    ],
)  # fmt: skip
async def test_a_hitl_name_the_blueprint_lacks_is_saved_with_a_warning_listing_its_tools(
    client: httpx.AsyncClient, tenant_a: Tenant, spec: dict[str, object], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, {"name": "unguarded", **spec})
    assert r.status_code == 201, r.text
    assert [w for w in r.json()["warnings"] if expected in w], r.json()["warnings"]


async def test_every_unknown_name_is_named_in_one_answer_and_nothing_is_saved(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    spec: dict[str, object] = {"name": "typos", "tags": ["countd", "hitl"], "hooks": ["hitl", "audit"],
            "config": {"hitl": {"tools": ["send"]}}}  # fmt: skip
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    for part in ("unknown tag 'countd'", "no middleware 'audit'"):
        assert part in error
    assert error.count("unknown tag") == 1 and error.count("no middleware") == 1
    events = await bus.store.read(tenant_a.id, "agency", agency_id)
    assert [e.type for e in events] == ["agency.created"]


async def test_names_the_system_has_are_saved(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    agency_id = await create_agency(client, tenant_a)
    spec: dict[str, object] = {"name": "guarded", "tags": ["counted"], "hooks": ["message_counter"],
            "config": {"hitl": {"tools": ["echo", "mail__send", "translator"]},
                       "mcpServers": [{"name": "mail", "url": "http://mail/mcp"}],
                       "remoteAgents": [{"name": "translator",
                                         "url": "https://agents.example/card.json"}],
                       "subagents": {"subagents": [
                           {"name": "scout", "tags": ["hitl"], "hooks": ["broken_state"],
                            "config": {"hitl": {"tools": ["set_status"]}}}]}}}  # fmt: skip
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 201, r.text
    assert r.json()["config"]["subagents"]["subagents"][0]["tags"] == ["hitl"]
    assert r.json()["warnings"] == []


MEMBER_CASES = [
    pytest.param({"tags": ["wether"]},
                 f"field 'agents.reviewer.tags': unknown tag 'wether' {TAGS}",
                 id="member-tag"),
    pytest.param({"config": {"subagents": {"subagents": [{"name": "scout", "hooks": ["audit"]}]}}},
                 "field 'agents.reviewer.config.subagents.subagents[0].hooks': no middleware "
                 f"'audit' {MIDDLEWARE}",
                 id="member-inline-subagent-hook"),
]  # fmt: skip


@pytest.mark.parametrize(("member", "expected"), MEMBER_CASES)
async def test_a_workflow_member_naming_what_the_system_lacks_is_refused(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus, member: dict[str, Any], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    definition = {"name": "review", "kickoff": "Go.", "agents": {"reviewer": member}}
    r = await client.post(
        f"/agency/{agency_id}/workflows", json={"definition": definition}, headers=tenant_a.auth
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("invalid workflow definition: ")
    assert expected in r.json()["error"]
    events = await bus.store.read(tenant_a.id, "agency", agency_id)
    assert [e.type for e in events] == ["agency.created"]


async def test_a_workflow_member_guarding_a_tool_it_lacks_is_created_with_a_warning(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    member = {"tags": ["counted"], "config": {"hitl": {"tools": ["ecko"]}}}
    definition = {"name": "review", "agents": {"reviewer": member}}
    r = await client.post(
        f"/agency/{agency_id}/workflows",
        json={"definition": definition},
        headers=tenant_a.auth,
        timeout=CREATE_WAIT * 2 + 10,  # 202 once the server waited for the members
    )
    assert r.status_code in (201, 202), r.text
    assert r.json()["warnings"] == [
        "field 'agents.reviewer.config.hitl.tools': 'ecko' is no tool of this blueprint (its "
        "tools: echo, notify_parent, set_status)"
    ]


async def test_a_yaml_workflow_member_naming_an_unknown_tag_is_refused(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    yaml = "name: review\nkickoff: Go.\nagents:\n  reviewer:\n    tags: [counted, wether]\n"
    r = await client.post(
        f"/agency/{agency_id}/workflows", json={"definition": yaml}, headers=tenant_a.auth
    )
    assert r.status_code == 400, r.text
    assert f"field 'agents.reviewer.tags': unknown tag 'wether' {TAGS}" in r.json()["error"]


@pytest.mark.parametrize("route", ["/run", "/serve"])
@pytest.mark.parametrize(("member", "expected"), MEMBER_CASES)
async def test_a_runs_inline_agent_naming_what_the_system_lacks_is_refused(
    client: httpx.AsyncClient, tenant_a: Tenant, route: str, member: dict[str, Any], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    body = {"agency": agency_id, "agents": {"reviewer": member}, "message": "Review this.",
            "timeoutSeconds": 1}  # fmt: skip
    r = await client.post(route, json=body, headers=tenant_a.auth)
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_the_document_lists_the_tags_and_middleware_a_blueprint_may_name(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/schema/openapi.json")).json()
    schemas = document["components"]["schemas"]
    blueprints = [
        key
        for key in schemas
        if key.endswith(("SaveBlueprintBody", "SubagentEntryBody", "InlineMember"))
        or key in ("Member", "SubagentEntry")
    ]
    assert len(blueprints) == 5, sorted(schemas)
    for key in blueprints:
        properties = schemas[key]["properties"]
        assert properties["tags"]["items"] == {"type": "string", "enum": ["counted", "hitl"]}, key
        if key != "InlineMember" and key != "Member" and not key.endswith("InlineMember"):
            hooks = properties["hooks"]["items"]
            assert hooks == {"type": "string", "enum": ["broken_state", "hitl", "message_counter"]}


async def test_the_document_states_which_models_a_blueprint_may_name(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    document = (await client.get("/schema/openapi.json")).json()
    schemas = document["components"]["schemas"]
    keys = [k for k in schemas if k.endswith("SaveBlueprintBody") or k == "Member"]
    assert len(keys) == 2, sorted(schemas)
    patterns = {schemas[k]["properties"]["model"]["pattern"] for k in keys}
    assert len(patterns) == 1
    pattern = re.compile(patterns.pop().replace("\\u0000", "\\x00"))
    agency_id = await create_agency(client, tenant_a)
    for model in ("gpt-4.1-mini", "openai:gpt-4.1-mini", "ft:gpt-4o:acme::x1", "nosuch:model"):
        r = await save(client, tenant_a, agency_id, {"name": "modelled", "model": model})
        stated = pattern.match(model) is not None
        assert (r.status_code == 201) == stated, (model, r.text)
        if not stated:
            assert r.status_code == 400 and "unknown model provider 'nosuch'" in r.json()["error"]
