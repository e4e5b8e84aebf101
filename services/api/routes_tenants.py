"""The tenants, for the admin: `GET /tenants` lists them (a deleted tenant is not listed;
`DELETE /tenants/{tenantId}` is in `routes_erasure.py`)."""

from __future__ import annotations

from litestar import get

from agency.projections.agency_queries import TenantView, list_tenants
from agency.services.api.auth import ADMIN_OPT, Deps


@get("/tenants", opt={ADMIN_OPT: True}, summary="Every tenant: id, name, created (admin)")
async def tenants(deps: Deps) -> list[TenantView]:
    async with deps.pool.acquire() as conn:
        return await list_tenants(conn)


TENANT_ROUTES = [tenants]
