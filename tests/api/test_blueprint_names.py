"""A saved blueprint's tags, hooks and `hitl.tools` that name what the agent system has are
saved and read back as they were given."""

from __future__ import annotations

import httpx

from tests.api.conftest import Tenant, create_agency


async def save(
    client: httpx.AsyncClient, tenant: Tenant, agency_id: str, spec: dict[str, object]
) -> httpx.Response:
    return await client.post(f"/agency/{agency_id}/blueprints", json=spec, headers=tenant.auth)


async def test_names_the_system_has_are_saved(client: httpx.AsyncClient, tenant_a: Tenant) -> None:
    agency_id = await create_agency(client, tenant_a)
    spec: dict[str, object] = {"name": "guarded", "tags": ["counted"], "hooks": ["message_counter"],
            "config": {"hitl": {"tools": ["echo", "mail__send"]},
                       "mcpServers": [{"name": "mail", "url": "http://mail/mcp"}]}}  # fmt: skip
    r = await save(client, tenant_a, agency_id, spec)
    assert r.status_code == 201, r.text
