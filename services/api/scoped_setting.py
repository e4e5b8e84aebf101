"""The routes of a setting held per tenant and per agency (a spend budget, retention):
`GET`/`PUT /{noun}` for the caller's tenant, `/tenants/{tenantId}/{noun}` for any tenant
(admin) and `/agency/{agencyId}/{noun}` for one of the caller's agencies. Each setting
says how it is read and set; the ownership checks are here, once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Generic, TypeVar

from litestar import get, put
from litestar.exceptions import NotFoundException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from agency.contracts.commands import AnyCommand
from agency.contracts.ids import new_id
from agency.contracts.subjects import Aggregate
from agency.domain.tenant_life import is_live_tenant
from agency.services.api.auth import (
    ADMIN_OPT,
    Caller,
    Deps,
    agency_events,
    path_id,
    tenant_and_agency,
    tenant_of,
)
from agency.services.api.deps import ApiDeps
from agency.services.api.path_params import AgencyId, TenantId
from agency.services.api.readback import read_your_write
from agency.services.api.routes_commands import Body

# The setting's body and answer; litestar reads the routes' signatures with these names
# bound to the setting's own types (`signature_namespace`).
BodyT = TypeVar("BodyT", bound=Body)
OutT = TypeVar("OutT")


@dataclass(frozen=True)
class Doc:
    """A route's handler name (its operation's), summary and documented answers."""

    name: str
    summary: str
    responses: Mapping[int, ResponseSpec] | None = None


@dataclass(frozen=True)
class ScopedSetting(Generic[BodyT, OutT]):
    noun: str
    body: type[BodyT]
    out: type[OutT]
    # What holds for the tenant, or with an agency id, for that agency.
    read: Callable[[ApiDeps, str, str], Awaitable[OutT]]
    # Set the tenant's, or an agency's (its ownership checked), and answer what holds.
    set_tenant: Callable[[ApiDeps, str, BodyT], Awaitable[OutT]]
    set_agency: Callable[[ApiDeps, str, str, BodyT], Awaitable[OutT]]
    _: KW_ONLY
    get_own: Doc
    put_own: Doc | None
    get_tenant: Doc
    put_tenant: Doc
    get_agency: Doc
    put_agency: Doc


async def existing_tenant(deps: ApiDeps, tenant: str) -> None:
    history = await deps.bus.store.read(tenant, "tenant", tenant)
    if not is_live_tenant(history):
        raise NotFoundException(f"tenant {tenant} not found")


async def send_setting(
    deps: ApiDeps, tenant: str, aggregate: Aggregate, aggregate_id: str, command: AnyCommand
) -> None:
    """Send a setting's command and wait (bounded) until the read models hold it."""
    key = new_id()
    await read_your_write(
        deps, tenant, aggregate, aggregate_id, key,
        send=lambda: deps.bus.commands.send(tenant, command, idempotency_key=key),
    )  # fmt: skip


def setting_routes(setting: ScopedSetting[BodyT, OutT]) -> list[HTTPRouteHandler]:
    """The setting's routes, in the order: own, tenant's (admin), agency's; each GET then PUT."""
    s = setting

    async def get_own(principal: Caller, deps: Deps) -> OutT:
        return await s.read(deps, tenant_of(principal), "")

    async def put_own(data: JSONBody[BodyT], principal: Caller, deps: Deps) -> OutT:
        return await s.set_tenant(deps, tenant_of(principal), data)

    async def get_tenant(tenant_id: TenantId, deps: Deps) -> OutT:
        tenant = path_id("tenant id", tenant_id)
        await existing_tenant(deps, tenant)
        return await s.read(deps, tenant, "")

    async def put_tenant(tenant_id: TenantId, data: JSONBody[BodyT], deps: Deps) -> OutT:
        tenant = path_id("tenant id", tenant_id)
        await existing_tenant(deps, tenant)
        return await s.set_tenant(deps, tenant, data)

    async def get_agency(agency_id: AgencyId, principal: Caller, deps: Deps) -> OutT:
        tenant, agency_id = tenant_and_agency(principal, agency_id)
        await agency_events(deps, tenant, agency_id)
        return await s.read(deps, tenant, agency_id)

    async def put_agency(
        agency_id: AgencyId, data: JSONBody[BodyT], principal: Caller, deps: Deps
    ) -> OutT:
        tenant, agency_id = tenant_and_agency(principal, agency_id)
        await agency_events(deps, tenant, agency_id)
        return await s.set_agency(deps, tenant, agency_id, data)

    table: list[tuple[Any, str, Callable[..., Any], Doc | None, bool]] = [
        (get, f"/{s.noun}", get_own, s.get_own, False),
        (put, f"/{s.noun}", put_own, s.put_own, False),
        (get, f"/tenants/{{tenantId:str}}/{s.noun}", get_tenant, s.get_tenant, True),
        (put, f"/tenants/{{tenantId:str}}/{s.noun}", put_tenant, s.put_tenant, True),
        (get, f"/agency/{{agencyId:str}}/{s.noun}", get_agency, s.get_agency, False),
        (put, f"/agency/{{agencyId:str}}/{s.noun}", put_agency, s.put_agency, False),
    ]
    names = {"BodyT": s.body, "OutT": s.out}
    routes = []
    for method, path, fn, doc, admin in table:
        if doc is None:
            continue
        fn.__name__ = fn.__qualname__ = doc.name
        routes.append(
            method(
                path,
                summary=doc.summary,
                responses=dict(doc.responses) if doc.responses else None,
                opt={ADMIN_OPT: True} if admin else None,
                signature_namespace=names,
            )(fn)
        )
    return routes
