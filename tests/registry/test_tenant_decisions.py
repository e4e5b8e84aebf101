"""The registry's decisions on a tenant's own aggregate."""

from __future__ import annotations

import pytest

from agency.contracts.commands import IssueApiKey
from agency.contracts.errors import CommandRejected
from agency.contracts.events import AnyEvent, ApiKeyIssued, TenantCreated, TenantDeleted
from agency.contracts.ids import new_id
from agency.infra.jetstream.connection import Bus
from agency.infra.jetstream.records import Position
from agency.services.registry import decisions


async def test_a_deleted_tenant_is_issued_no_key(bus: Bus, tenant: str) -> None:
    created: list[AnyEvent] = [TenantCreated(name="gone"), ApiKeyIssued(key_id="k1", key_hash="h1")]
    await bus.store.append(tenant, "tenant", tenant, created, expected=Position())
    command = IssueApiKey(key_id="k2", key_hash="h2", name="late")
    history = await bus.store.read(tenant, "tenant", tenant)
    assert decisions.issue_api_key(command, history, new_id())  # a live tenant's: issued
    deleted = TenantDeleted(request_id=new_id(), requested_by="admin")
    await bus.store.append(tenant, "tenant", tenant, [deleted], expected=history[-1].position)
    history = await bus.store.read(tenant, "tenant", tenant)
    with pytest.raises(CommandRejected, match="deleted"):
        decisions.issue_api_key(command, history, new_id())
