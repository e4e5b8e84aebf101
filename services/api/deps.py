"""What route handlers receive: the caller (`principal`) and the app's resources (`deps`).

The app registers two litestar dependencies under these names; handlers declare
`principal: Principal` and/or `deps: ApiDeps` parameters to get them.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from infra.jetstream.connection import Bus
from services.agents.system import AgentSystem


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a tenant (by API key or the single-tenant secret) or the admin."""

    tenant_id: str
    admin: bool = False


@dataclass(frozen=True, slots=True)
class ApiSettings:
    admin_secret: str | None = None
    # The seed's `X-SECRET` set-up: one shared secret, one tenant.
    shared_secret: str | None = None
    shared_secret_tenant: str | None = None
    max_body_bytes: int = 1024 * 1024
    # How long a create waits for its read model, so the caller can read what it wrote.
    read_your_writes_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class ApiDeps:
    pool: asyncpg.Pool
    bus: Bus
    system: AgentSystem
    settings: ApiSettings
