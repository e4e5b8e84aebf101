"""The A2A routes: the agent cards, the JSON-RPC binding and the HTTP+JSON binding."""

from __future__ import annotations

from litestar import Router

from agency.services.api.a2a.jsonrpc import JSONRPC_ROUTES
from agency.services.api.a2a.rest import REST_ROUTES
from agency.services.api.a2a.routes_card import CARD_ROUTES
from agency.services.api.auth import API_KEY_HEADER_OPT


def a2a_router() -> Router:
    return Router(
        "/",
        route_handlers=[*CARD_ROUTES, *JSONRPC_ROUTES, *REST_ROUTES],
        # The key as a bearer token (the cards' scheme), or in `x-api-key`.
        opt={API_KEY_HEADER_OPT: True},
        # The A2A specification documents these, and docs/protocols.md.
        include_in_schema=False,
    )
