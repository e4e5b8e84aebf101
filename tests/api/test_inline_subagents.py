"""`config.subagents.subagents` over HTTP: seed 000's whole blueprints inline, references by
name, both checked as saved blueprints are, errors naming the path."""

from __future__ import annotations

import httpx
import pytest

from agency.contracts.commands import SaveBlueprint
from agency.contracts.events import BlueprintSaved, BlueprintSpec
from agency.contracts.events.blueprint import (
    BlueprintConfig,
    SubagentEntry,
    SubagentsConfig,
)
from agency.contracts.events.tool_servers import (
    McpServer,
)
from agency.infra.jetstream.connection import Bus
from tests.api.conftest import Tenant, create_agency
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually

# Seed 000: `type SubagentsConfig = { subagents?: { subagents: AgentBlueprint[] } }`, with
# `AgentBlueprint = { name, description, prompt, tags, model?, config? }`; the tags and
# guarded tools are those of the tests' agent system (`tests/api/conftest.py`).
SECURITY_AGENT = {
    "name": "security-agent",
    "description": "Analyzes security logs.",
    "prompt": "You are a security analyst.",
    "tags": ["counted"],
    "model": "openai:gpt-4.1-mini",
}
MY_AGENT = {
    "name": "my-agent",
    "description": "Does things.",
    "prompt": "You are...",
    "tags": ["counted", "hitl"],
    "config": {"maxSteps": 5, "hitl": {"tools": ["echo"]}},
}


def manager(*entries: object) -> dict[str, object]:
    return {
        "name": "manager-agent",
        "description": "Delegates.",
        "prompt": "You delegate.",
        "tags": ["counted"],
        "config": {"subagents": {"subagents": list(entries)}},
    }


async def save(
    client: httpx.AsyncClient, tenant: Tenant, agency_id: str, body: dict[str, object]
) -> httpx.Response:
    return await client.post(f"/agency/{agency_id}/blueprints", json=body, headers=tenant.auth)


async def test_the_seeds_inline_blueprints_are_saved_stored_and_read_back(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    entries = [
        SECURITY_AGENT,
        MY_AGENT,
        {"name": "helper"},
        "worker",
        {**SECURITY_AGENT, "name": "resumable-analyst", "resumable": True, "maxInstances": 2},
    ]
    body = manager(*entries)
    r = await save(client, tenant_a, agency_id, body)
    assert r.status_code == 201, r.text
    assert r.json()["config"]["subagents"]["subagents"] == entries

    (saved,) = [
        e.payload
        for e in await bus.store.read(tenant_a.id, "agency", agency_id)
        if isinstance(e.payload, BlueprintSaved)
    ]
    assert isinstance(saved, BlueprintSaved) and saved.blueprint.config.subagents is not None
    inline = saved.blueprint.config.subagents.inline_blueprints()
    assert sorted(inline) == ["my-agent", "resumable-analyst", "security-agent"]
    assert inline["security-agent"] == BlueprintSpec(
        name="security-agent",
        description="Analyzes security logs.",
        prompt="You are a security analyst.",
        tags=("counted",),
        model="openai:gpt-4.1-mini",
    )
    assert inline["my-agent"].config.max_steps == 5

    for url in (f"/agency/{agency_id}/blueprints/manager-agent", f"/agency/{agency_id}/blueprints"):
        answer = (await client.get(url, headers=tenant_a.auth)).json()
        one = (
            answer
            if isinstance(answer, dict)
            else next(b for b in answer if b["name"] == "manager-agent")
        )
        assert one["config"]["subagents"]["subagents"] == entries


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param({**SECURITY_AGENT, "tags": "counted"},
                     "field 'config.subagents.subagents[0].tags': Expected `array`", id="tags"),
        pytest.param({**SECURITY_AGENT, "model": "m" * 201},
                     "field 'config.subagents.subagents[0].model'", id="model-too-long"),
        pytest.param({**SECURITY_AGENT, "config": {"maxStep": 3}},
                     "field 'config.subagents.subagents[0].config': Object contains unknown field `maxStep`",
                     id="nested-config"),
        pytest.param({**SECURITY_AGENT, "version": "one"},
                     "field 'config.subagents.subagents[0].version'", id="semver"),
        pytest.param({**SECURITY_AGENT, "promt": "typo"},
                     "field 'config.subagents.subagents[0]': Object contains unknown field `promt`",
                     id="unknown-field"),
        pytest.param({**SECURITY_AGENT, "config": {"mcpServers": [{"name": "m", "command": ["sh"]}]}},
                     "field 'config.subagents.subagents[0].config.mcpServers[0]'", id="stdio-mcp"),
        pytest.param({**SECURITY_AGENT, "config": {"subagents": {"subagents": [{"name": "x", "tags": [1]}]}}},
                     "field 'config.subagents.subagents[0].config.subagents.subagents[0].tags[0]'",
                     id="nested-inline"),
    ],
)  # fmt: skip
async def test_an_ill_typed_inline_blueprint_is_refused_naming_its_path(
    client: httpx.AsyncClient, tenant_a: Tenant, entry: dict[str, object], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, manager(entry))
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_an_inline_blueprint_reaching_loopback_is_forbidden_naming_it(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    """Well formed, and an address no tenant's connection may reach: 403, not 400."""
    agency_id = await create_agency(client, tenant_a)
    entry = {
        **SECURITY_AGENT,
        "config": {"mcpServers": [{"name": "m", "url": "http://127.0.0.1:4222/mcp"}]},
    }
    r = await save(client, tenant_a, agency_id, manager(entry))
    assert r.status_code == 403, r.text
    said = r.json()["error"]
    assert f"blueprint {SECURITY_AGENT['name']!r}: field 'config.mcpServers[0].url'" in said, said
    assert "AGENCY_ALLOW_HOSTS" in said, said


async def test_an_inline_blueprint_naming_an_operators_mcp_server_is_refused_on_the_bus(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    """A client on the bus: an inline blueprint may no more start processes on our hosts
    than the blueprint holding it."""
    agency_id = await create_agency(client, tenant_a)
    stdio = McpServer(name="local", command=("sh",))
    inline = SubagentEntry(name="sneaky", prompt="p", config=BlueprintConfig(mcp_servers=(stdio,)))
    outer = BlueprintSpec(
        name="outer", config=BlueprintConfig(subagents=SubagentsConfig(subagents=(inline,)))
    )
    await bus.commands.send(tenant_a.id, SaveBlueprint(agency_id=agency_id, blueprint=outer))

    async def dead_lettered() -> None:
        letters = await dead_letters_for(bus, tenant_a.id)
        assert len(letters) == 1 and "stdio servers" in letters[0][1], letters

    await assert_eventually(dead_lettered, timeout=30)
    events = await bus.store.read(tenant_a.id, "agency", agency_id)
    assert [e.type for e in events] == ["agency.created"]


async def test_an_inline_blueprints_mcp_server_on_a_private_address_is_refused_on_the_bus(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    private = McpServer(name="meta", url="http://169.254.169.254/mcp")
    inline = SubagentEntry(name="probe", prompt="p", config=BlueprintConfig(mcp_servers=(private,)))
    outer = BlueprintSpec(
        name="outer", config=BlueprintConfig(subagents=SubagentsConfig(subagents=(inline,)))
    )
    await bus.commands.send(tenant_a.id, SaveBlueprint(agency_id=agency_id, blueprint=outer))

    async def dead_lettered() -> None:
        letters = await dead_letters_for(bus, tenant_a.id)
        assert len(letters) == 1 and "blueprint 'probe'" in letters[0][1], letters
        assert "is refused" in letters[0][1]

    await assert_eventually(dead_lettered, timeout=30)
    events = await bus.store.read(tenant_a.id, "agency", agency_id)
    assert [e.type for e in events] == ["agency.created"]
