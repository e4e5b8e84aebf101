"""Database sessions of a tenant's request read as that tenant, under row-level security.

The auth middleware names the request's tenant in a context variable; the API's pool runs
`scope_session` on every acquire, which switches a tenant's session to the confined reader
role with `app.tenant_id` set (projections/tenancy.py). The admin's requests, the key
look-up before a tenant is known, and the API's own background work keep the pool's role.
Every acquire sets the role either way: the pool's reset on release (`RESET ALL`) leaves a
`SET ROLE` in place.
"""

from __future__ import annotations

from contextvars import ContextVar

import asyncpg

from agency.projections.tenancy import act_as_owner, act_for_tenant

current_tenant: ContextVar[str | None] = ContextVar("agency_current_tenant", default=None)


async def scope_session(conn: asyncpg.Connection) -> None:
    tenant = current_tenant.get()
    if tenant:
        await act_for_tenant(conn, tenant)
    else:
        await act_as_owner(conn)
