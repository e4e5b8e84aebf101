"""Whether a blueprint's `model` can run for a tenant, checked where blueprints are saved
(`POST …/blueprints`, a workflow's inline members): its provider must be known, and
served by the tenant's own settings or, where the operator lets them, the operator's
(`docs/models.md`)."""

from __future__ import annotations

from agency.services.api.deps import ApiDeps
from agency.services.llm.tenant_models import tenant_model_problem, tenant_models


async def model_problem(deps: ApiDeps, tenant: str, model: str) -> str | None:
    """Why `model` cannot run for `tenant`, or None ("" is the system's default)."""
    if not model:
        return None
    history = await deps.bus.store.read(tenant, "tenant", tenant)
    return tenant_model_problem(
        deps.models, tenant_models(tenant, (e.payload for e in history)), model
    )
