"""A saved blueprint's tags, hooks and `hitl.tools` must name what the agent system has: an
unknown one is a 400 naming it and listing what exists, never silently nothing."""

from __future__ import annotations

import httpx
import pytest

from infra.jetstream.connection import Bus
from tests.api.conftest import Tenant, create_agency


async def save(
    client: httpx.AsyncClient, tenant: Tenant, agency_id: str, spec: dict[str, object]
) -> httpx.Response:
    return await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant.auth)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"tags": ["counted", "wether"]},
                     "field 'tags': unknown tag 'wether' (the tags of this agent system: counted, hitl)",
                     id="unknown-tag"),
        pytest.param({"hooks": ["audit"]},
                     "field 'hooks': no middleware 'audit' (the middleware of this agent system: "
                     "broken_state, hitl, message_counter)",
                     id="unknown-hook"),
        pytest.param({"tags": ["counted"], "config": {"hitl": {"tools": ["ecko"]}}},
                     "field 'config.hitl.tools': 'ecko' is no tool of this blueprint (its tools: "
                     "echo, notify_parent, set_status)",
                     id="unknown-hitl-tool"),
        pytest.param({"config": {"hitl": {"tools": ["sendmail"]},
                                 "mcpServers": [{"name": "mail", "url": "http://mail/mcp"}]}},
                     "'sendmail' is no tool of this blueprint (its tools: notify_parent, "
                     "set_status, mail__<tool>)",
                     id="hitl-tool-not-of-the-mcp-server"),
    ],
)  # fmt: skip
async def test_a_name_the_system_does_not_have_is_refused_listing_what_exists(
    client: httpx.AsyncClient, tenant_a: Tenant, spec: dict[str, object], expected: str
) -> None:
    agency_id = await create_agency(client, tenant_a)
    r = await save(client, tenant_a, agency_id, {"name": "misnamed", **spec})
    assert r.status_code == 400, r.text
    assert expected in r.json()["error"]


async def test_every_unknown_name_is_named_in_one_answer_and_nothing_is_saved(
    client: httpx.AsyncClient, tenant_a: Tenant, bus: Bus
) -> None:
    agency_id = await create_agency(client, tenant_a)
    spec: dict[str, object] = {"name": "typos", "tags": ["countd", "hitl"], "hooks": ["hitl", "audit"],
            "config": {"hitl": {"tools": ["send"]}}}  # fmt: skip
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    for part in ("unknown tag 'countd'", "no middleware 'audit'", "'send' is no tool"):
        assert part in error
    assert error.count("unknown tag") == 1 and error.count("no middleware") == 1
    events = await bus.store.read(tenant_a.id, "agency", agency_id)
    assert [e.type for e in events] == ["agency.created"]


async def test_names_the_system_has_are_saved(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    agency_id = await create_agency(client, tenant_a)
    spec: dict[str, object] = {"name": "guarded", "tags": ["counted"], "hooks": ["message_counter"],
            "config": {"hitl": {"tools": ["echo", "mail__send"]},
                       "mcpServers": [{"name": "mail", "url": "http://mail/mcp"}]}}  # fmt: skip
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 201, r.text
