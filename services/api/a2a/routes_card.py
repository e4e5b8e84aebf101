"""The agent cards' routes: a blueprint's at `/a2a/{agencyId}/{blueprint}/.well-known/
agent-card.json`, the tenant's catalogue at `/.well-known/agent-card.json`."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.datastructures import State

from agency.services.a2a.wire import ENCODER
from agency.services.api.a2a.answers import agent_named
from agency.services.api.a2a.card import (
    CARD_PATH,
    PREFIX,
    agent_url,
    blueprint_card,
    blueprint_spec,
    tenant_card,
)
from agency.services.api.a2a.jsonrpc import AgencyPath, BlueprintPath
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.forwarded import public_base


def _json(value: Any) -> Response[bytes]:
    return Response(ENCODER.encode(value), media_type="application/json")


@get(f"{PREFIX}/{{agencyId:str}}/{{blueprint:str}}{CARD_PATH}")
async def agent_card(
    agency_id: AgencyPath,
    blueprint: BlueprintPath,
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, State],
) -> Response[bytes]:
    agent = await agent_named(deps, principal, request, agency_id, blueprint)
    spec = await blueprint_spec(deps, agent.tenant, agent.agency_id, agent.blueprint)
    url = agent_url(public_base(request.scope), agent.agency_id, agent.blueprint)
    return _json(blueprint_card(deps, spec, url))


@get(CARD_PATH)
async def catalogue_card(
    principal: Caller, deps: Deps, request: Request[Any, Any, State]
) -> Response[bytes]:
    return _json(await tenant_card(deps, tenant_of(principal), public_base(request.scope)))


CARD_ROUTES = [agent_card, catalogue_card]
