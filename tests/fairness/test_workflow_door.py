"""Workflow definitions are checked at the door as blueprints are: a member the registry
would refuse (an MCP `command`, a prompt over the limit: 400; an address no tenant may
reach: 403) answers with the reason, on `POST /workflows` and `/run`, and nothing is
sent; on the bus, the create is rejected at once with the reason instead of waiting for a
blueprint that never comes."""

from __future__ import annotations

from typing import Any

from agency.contracts.commands import CreateWorkflow, WorkflowMemberSpec
from agency.contracts.events import BlueprintSpec, McpServer
from agency.contracts.events.blueprint import BlueprintConfig
from agency.contracts.ids import new_id
from agency.infra.jetstream import dlq_admin
from agency.services.tenancy.door_limits import PROMPT_LIMIT, DoorLimits
from tests.deadletters import dead_letters
from tests.fairness.conftest import Tenant
from tests.helpers import assert_eventually

STDIO = "stdio servers (`command`) are the operator's"


def _member(**config: Any) -> dict[str, Any]:
    return {"system_prompt": "You help.", "tags": ["default"], "config": config}


async def _no_workflows(tenant: Tenant) -> None:
    r = await tenant.http.get(f"/agency/{tenant.agency}/workflows")
    assert r.status_code == 200 and r.json() == [], r.text


async def test_a_definition_naming_an_mcp_command_answers_400_and_sends_nothing(
    tenant: Tenant,
) -> None:
    stdio = _member(mcp_servers=[{"name": "local", "command": ["cat"]}])
    definition = {"name": "tools", "agents": {"helper": stdio}, "kickoff": "@helper go"}
    r = await tenant.http.post(
        f"/agency/{tenant.agency}/workflows", json={"definition": definition}
    )
    assert r.status_code == 400, r.text
    assert "agents.helper" in r.json()["error"] and STDIO in r.json()["error"], r.text

    r = await tenant.http.post("/run", json={"agents": {"helper": stdio}, "message": "go"})
    assert r.status_code == 400, r.text
    assert STDIO in r.json()["error"]

    loopback = _member(mcp_servers=[{"name": "calc", "url": "http://127.0.0.1:9/mcp"}])
    r = await tenant.http.post("/run", json={"agents": {"calc": loopback}, "message": "go"})
    assert r.status_code == 403 and "loopback" in r.json()["error"], r.text

    big = {**_member(), "system_prompt": "p" * (DoorLimits().max_prompt_bytes + 1)}
    definition = {"name": "big", "agents": {"writer": big}, "kickoff": "@writer go"}
    r = await tenant.http.post(
        f"/agency/{tenant.agency}/workflows", json={"definition": definition}
    )
    assert r.status_code == 400 and PROMPT_LIMIT in r.json()["error"], r.text

    await _no_workflows(tenant)
    assert await dead_letters(tenant.bus, tenant.id) == []


async def test_a_create_over_nats_with_a_refused_member_is_rejected_at_once_with_the_reason(
    tenant: Tenant,
) -> None:
    member = BlueprintSpec(
        name="helper",
        prompt="You help.",
        config=BlueprintConfig(mcp_servers=(McpServer(name="local", command=("cat",)),)),
    )
    workflow = "wf_" + new_id().lower()
    await tenant.bus.commands.send(
        tenant.id,
        CreateWorkflow(
            agency_id=tenant.agency,
            workflow_id=workflow,
            name="tools",
            members=(WorkflowMemberSpec(name="helper", blueprint=member),),
        ),
    )

    async def rejected() -> dlq_admin.LetterInfo:
        letters = await dead_letters(tenant.bus, tenant.id)
        assert letters, "no dead letter yet"
        return letters[-1]

    # Bounded well below the registry wait and retries a refused save used to take.
    letter = await assert_eventually(rejected, timeout=10)
    assert letter.reason == "invalid_blueprint", letter
    assert "agents.helper" in letter.detail and STDIO in letter.detail
    assert len(await dead_letters(tenant.bus, tenant.id)) == 1  # the create alone, once
    await _no_workflows(tenant)
