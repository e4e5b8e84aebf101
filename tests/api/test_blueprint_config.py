"""Blueprint config is typed at the API: a wrong value is a 400 naming the field."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from agency.contracts.commands import SaveBlueprint
from agency.contracts.events import BlueprintSaved, BlueprintSpec
from agency.contracts.events.blueprint import BlueprintConfig
from agency.infra.jetstream.connection import Bus
from agency.services.llm.catalog import ProviderCatalog
from tests.api.conftest import STATIC_AGENT, Api, Tenant, create_agency, running_api
from tests.deadletters import dead_letters_for
from tests.helpers import assert_eventually


async def save(
    client: httpx.AsyncClient, tenant: Tenant, agency_id: str, spec: dict[str, object]
) -> httpx.Response:
    return await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant.auth)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param({"maxSteps": True}, "field 'config.maxSteps': Expected `int | null`, got `bool`", id="bool-steps"),
        pytest.param({"maxSteps": 0}, "field 'config.maxSteps': Expected `int` >= 1", id="zero-steps"),
        pytest.param({"tokenBudget": "lots"}, "field 'config.tokenBudget': Expected `int | null`, got `str`", id="str-budget"),
        pytest.param({"hitl": {"tools": "send"}}, "field 'config.hitl.tools': Expected `array`", id="hitl-not-a-list"),
        pytest.param({"subagents": {"subagents": [{"name": "w", "maxInstances": True}]}},
                     "field 'config.subagents.subagents[0].maxInstances'", id="bool-instances"),
        pytest.param({"subagents": {"subagents": [{"name": "w", "optional": "not a name"}]}},
                     "field 'config.subagents.subagents[0].optional'", id="optional-not-a-name"),
        pytest.param({"callableAgents": [3]}, "field 'config.callableAgents[0]': Expected `str`", id="int-agent"),
        pytest.param({"maxStep": 5}, "field 'config': Object contains unknown field `maxStep`", id="misspelt"),
        pytest.param({"mcpServers": [{"name": "m"}]}, "field 'config.mcpServers[0]': Object missing required field `url`", id="mcp-no-url"),
        pytest.param({"mcpServers": [{"name": "m", "command": ["sh"]}]}, "Object contains unknown field `command`", id="mcp-stdio"),
        pytest.param({"mcpServers": [{"name": "m", "url": "http://h/mcp", "headers": {"A": "${ENV:HOME}"}}]},
                     "field 'config.mcpServers[0].headers[...]': Expected `str` matching regex", id="mcp-env-reference"),
        pytest.param({"mcpServers": [{"name": "m.x", "url": "http://h/mcp"}]}, "config.mcpServers[0].name", id="mcp-bad-name"),
    ],
)  # fmt: skip
async def test_an_ill_typed_config_is_refused_naming_the_field(
    client: httpx.AsyncClient, tenant_a: Tenant, config: dict[str, object], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, {"name": "bad", "config": config})
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_config_is_camel_case_over_http_and_snake_case_in_the_log(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    config = {
        "maxSteps": 7,
        "tokenBudget": 5000,
        "hitl": {"tools": ["calc__send_email"]},
        "subagents": {
            "subagents": [
                "w",
                {"name": "h", "resumable": True, "maxInstances": 2},
                {"name": "o", "optional": "USE_O"},
            ]
        },
        "callableAgents": ["other"],
        "mcpServers": [{"name": "calc", "url": "http://calc/mcp", "headers": {"X-Key": "k"}}],
        "extra": {"myMiddleware": {"level": 3}},
    }
    r = await save(client, tenant_a, agency_id, {"name": "typed", "config": config})
    assert r.status_code == 201, r.text
    assert r.json()["config"] == config

    (saved,) = [
        e
        for e in await bus.store.read(tenant_a.id, "agency", agency_id)
        if e.type == "blueprint.saved"
    ]
    assert isinstance(saved.payload, BlueprintSaved)
    stored = saved.payload.blueprint.config
    assert (stored.max_steps, stored.token_budget, stored.callable_agents) == (7, 5000, ("other",))
    assert b'"max_steps":7' in saved.raw and b'"max_instances":2' in saved.raw
    assert b'"optional":"USE_O"' in saved.raw
    assert stored.extra == {"myMiddleware": {"level": 3}}
    assert [(m.name, m.url, m.headers) for m in stored.mcp_servers] == [
        ("calc", "http://calc/mcp", {"X-Key": "k"})
    ]

    listed = (await client.get(f"/agency/{agency_id}/blueprints", headers=tenant_a.auth)).json()
    assert next(b for b in listed if b["name"] == "typed")["config"] == config


async def test_dual_ai_sides_are_camel_case_over_http(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    side_a = {"prompt": "A", "stopOnResponse": False, "stopTool": "pass_turn", "maxSteps": 3}
    side_b = {"prompt": "B", "sessionStop": {"name": "approve", "messageProperty": "summary"}}
    spec = {
        "name": "pair",
        "type": "dual_ai",
        "sideA": side_a,
        "sideB": side_b,
        "maxSessionTurns": 4,
    }
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 201, r.text
    assert r.json()["sideA"] == side_a and r.json()["sideB"] == side_b

    old = {"name": "pair2", "type": "dual_ai", "sideA": {"prompt": "A", "stop_tool": "x"}}
    refused = await save(client, tenant_a, agency_id, old)
    assert refused.status_code == 400 and "unknown field `stop_tool`" in refused.json()["error"]


async def test_a_save_command_over_nats_with_an_ill_typed_config_is_dead_lettered(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    """A client on the bus, not the API: the registry refuses it with the field named."""
    agency_id = await create_agency(client, tenant_a)
    bad = BlueprintSpec(name="bad", config=BlueprintConfig(max_steps=True))
    await bus.commands.send(tenant_a.id, SaveBlueprint(agency_id=agency_id, blueprint=bad))

    async def dead_lettered() -> None:
        letters = await dead_letters_for(bus, tenant_a.id)
        assert [reason for reason, _, _ in letters] == ["undecodable"]
        assert "Expected `int | null`, got `bool`" in letters[0][1]
        assert "$.payload.blueprint.config.max_steps" in letters[0][1]

    await assert_eventually(dead_lettered, timeout=10)
    events = await bus.store.read(tenant_a.id, "agency", agency_id)
    assert [e.type for e in events] == ["agency.created"]


DESCRIBED = {
    "title": "Asset maker",
    "icon": "🎨",
    "env": {"STYLE": "pixel", "MAX_SIZE": "64"},
    "hooks": ["message_counter", "hitl"],
    "packageName": "@acme/asset-maker",
    "version": "1.2.0-beta.1",
    "author": "Acme Tools",
    "license": "MIT",
}


async def test_title_icon_env_hooks_and_packaging_are_saved_stored_and_read_back(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, {"name": "described", **DESCRIBED})
    assert r.status_code == 201, r.text
    assert {k: r.json()[k] for k in DESCRIBED} == DESCRIBED

    (saved,) = [
        e
        for e in await bus.store.read(tenant_a.id, "agency", agency_id)
        if e.type == "blueprint.saved"
    ]
    assert isinstance(saved.payload, BlueprintSaved)
    spec = saved.payload.blueprint
    assert (spec.title, spec.icon, spec.env, spec.hooks) == (
        "Asset maker", "🎨", {"STYLE": "pixel", "MAX_SIZE": "64"}, ("message_counter", "hitl"),
    )  # fmt: skip
    assert (spec.package_name, spec.version, spec.author, spec.license) == (
        "@acme/asset-maker", "1.2.0-beta.1", "Acme Tools", "MIT",
    )  # fmt: skip
    assert b'"package_name":"@acme/asset-maker"' in saved.raw

    one = await client.get(f"/agency/{agency_id}/blueprints/described", headers=tenant_a.auth)
    assert one.status_code == 200, one.text
    assert {k: one.json()[k] for k in DESCRIBED} == DESCRIBED
    assert one.json()["source"] == "dynamic" and one.json()["revision"] == 1
    listed = (await client.get(f"/agency/{agency_id}/blueprints", headers=tenant_a.auth)).json()
    item = next(b for b in listed if b["name"] == "described")
    assert {k: item[k] for k in DESCRIBED} == DESCRIBED


async def test_a_blueprint_without_the_descriptive_fields_reads_with_their_defaults(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    assert (await save(client, tenant_a, agency_id, {"name": "plain"})).status_code == 201
    one = (await client.get(f"/agency/{agency_id}/blueprints/plain", headers=tenant_a.auth)).json()
    defaults = {"title": "", "icon": "", "env": {}, "hooks": [], "packageName": "",
                "version": "", "author": "", "license": ""}  # fmt: skip
    assert {k: one[k] for k in defaults} == defaults


async def test_get_of_a_missing_blueprint_is_404_and_a_static_one_is_found(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    missing = await client.get(f"/agency/{agency_id}/blueprints/nope", headers=tenant_a.auth)
    assert missing.status_code == 404 and "no blueprint 'nope'" in missing.json()["error"]
    static = await client.get(
        f"/agency/{agency_id}/blueprints/{STATIC_AGENT}", headers=tenant_a.auth
    )
    assert static.status_code == 200 and static.json()["source"] == "static"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({"title": "t" * 201}, "field 'title'", id="title-too-long"),
        pytest.param({"icon": 3}, "field 'icon': Expected `str`, got `int`", id="icon-not-text"),
        pytest.param({"env": {"1BAD": "x"}}, "field 'env' (a key)", id="env-bad-name"),
        pytest.param({"env": {"GOOD": 1}}, "field 'env[...]': Expected `str`, got `int`", id="env-not-text"),
        pytest.param({"env": ["A=1"]}, "field 'env': Expected `object`, got `array`", id="env-a-list"),
        pytest.param({"hooks": "on_error"}, "field 'hooks': Expected `array`, got `str`", id="hooks-not-a-list"),
        pytest.param({"hooks": [""]}, "field 'hooks[0]'", id="hook-empty"),
        pytest.param({"packageName": "Has Spaces"}, "field 'packageName'", id="package-name"),
        pytest.param({"version": "1.0"}, "field 'version'", id="version-not-semver"),
        pytest.param({"license": 5}, "field 'license': Expected `str`, got `int`", id="license-not-text"),
        pytest.param({"package_name": "x"}, "unknown field `package_name`", id="snake-case"),
    ],
)  # fmt: skip
async def test_ill_typed_descriptive_fields_are_refused_naming_the_field(
    client: httpx.AsyncClient, tenant_a: Tenant, fields: dict[str, object], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, {"name": "bad", **fields})
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_the_list_answers_a_dual_ai_blueprints_sides_and_exposure_in_camel_case(
    client: httpx.AsyncClient, tenant_a: Tenant
) -> None:
    agency_id = await create_agency(client, tenant_a)
    side_a = {
        "prompt": "asset_worker",
        "label": "Worker",
        "sessionFail": {"name": "fail_asset", "messageProperty": "reason",
                        "attachmentsProperty": "attachments"},
    }  # fmt: skip
    side_b = {
        "prompt": "asset_reviewer",
        "stopOnResponse": False,
        "sessionStop": {"name": "approve_asset", "messageProperty": "summary"},
        "sessionStatus": "update_asset_status",
    }
    pair = {
        "name": "asset_subagent",
        "type": "dual_ai",
        "maxSessionTurns": 40,
        "exposeAsTool": True,
        "toolDescription": "Generate and QA assets.",
        "sideA": side_a,
        "sideB": side_b,
    }
    assert (await save(client, tenant_a, agency_id, pair)).status_code == 201
    assert (await save(client, tenant_a, agency_id, {"name": "chat"})).status_code == 201

    listed = (await client.get(f"/agency/{agency_id}/blueprints", headers=tenant_a.auth)).json()
    by_name = {b["name"]: b for b in listed}
    dual = by_name["asset_subagent"]
    assert (dual["sideA"], dual["sideB"]) == (side_a, side_b)
    assert (dual["exposeAsTool"], dual["maxSessionTurns"]) == (True, 40)
    assert dual["toolDescription"] == "Generate and QA assets."
    for single in (by_name["chat"], by_name[STATIC_AGENT]):
        assert (single["sideA"], single["sideB"], single["exposeAsTool"]) == (None, None, False)
    one = await client.get(f"/agency/{agency_id}/blueprints/asset_subagent", headers=tenant_a.auth)
    assert (one.json()["sideA"], one.json()["sideB"], one.json()["exposeAsTool"]) == (
        side_a, side_b, True,
    )  # fmt: skip


async def test_init_mappings_are_camel_case_over_http_and_checked(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    entry = {"name": "worker", "initUserMessageProperty": "brief",
             "initAttachmentsProperty": "inputs"}  # fmt: skip
    spec = {
        "name": "mapped",
        "initUserMessageProperty": "brief",
        "initAttachmentsProperty": "images",
        "config": {"subagents": {"subagents": [entry]}},
    }
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 201, r.text
    assert r.json()["initUserMessageProperty"] == "brief"
    assert r.json()["config"]["subagents"]["subagents"] == [entry]
    (saved,) = [
        e
        for e in await bus.store.read(tenant_a.id, "agency", agency_id)
        if e.type == "blueprint.saved"
    ]
    assert b'"init_attachments_property":"images"' in saved.raw
    assert b'"init_user_message_property":"brief"' in saved.raw
    one = await client.get(f"/agency/{agency_id}/blueprints/mapped", headers=tenant_a.auth)
    mapped = {k: one.json()[k] for k in ("initUserMessageProperty", "initAttachmentsProperty")}
    assert mapped == {"initUserMessageProperty": "brief", "initAttachmentsProperty": "images"}

    bad = {"name": "bad", "initUserMessageProperty": "two words"}
    refused = await save(client, tenant_a, agency_id, bad)
    assert refused.status_code == 400
    assert "field 'initUserMessageProperty'" in refused.json()["error"]
    bad_entry = {"name": "bad", "config": {"subagents": {"subagents": [
        {"name": "w", "initAttachmentsProperty": ""}]}}}  # fmt: skip
    refused = await save(client, tenant_a, agency_id, bad_entry)
    assert refused.status_code == 400
    assert "config.subagents.subagents[0].initAttachmentsProperty" in refused.json()["error"]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param("acme:m1", "unknown model provider 'acme'", id="unknown"),
        pytest.param("gemini:flash", "model provider 'gemini' (model 'gemini:flash') is not configured", id="unconfigured"),
        pytest.param("openai:", "names no model", id="no-name"),
    ],
)  # fmt: skip
async def test_a_blueprint_naming_a_provider_not_configured_is_refused_naming_the_model(
    api: Api, tenant_a: Tenant, model: str, expected: str
) -> None:
    catalog = ProviderCatalog.from_env({"OPENAI_API_KEY": "sk-never-shown"})
    async with (
        running_api(replace(api.deps, models=catalog)) as url,
        httpx.AsyncClient(base_url=url, timeout=15) as client,
    ):
        agency_id = await create_agency(client, tenant_a)
        r = await save(client, tenant_a, agency_id, {"name": "bad", "model": model})
        ok = await save(client, tenant_a, agency_id, {"name": "good", "model": "openai:gpt-4.1"})
    assert r.status_code == 400, r.text
    assert "field 'model'" in r.json()["error"] and expected in r.json()["error"]
    assert "sk-never-shown" not in r.text
    assert ok.status_code == 201, ok.text
