"""LangGraph Agent Server compatibility: the routes the official `langgraph-sdk` client calls,
mounted at `/langgraph` and mapped onto our blueprints, threads and runs.

`get_client(url=f"{base}/langgraph", api_key=key)` works unchanged: the tenant's API key
arrives as `x-api-key`. The wire format here is LangGraph's own (snake_case), an explicit
exception to the API's camelCase, confined to this prefix. `docs/langgraph.md` has the
mapping and the list of what does not map.
"""

from __future__ import annotations

from litestar import Router

from services.api.auth import API_KEY_HEADER_OPT
from services.api.langgraph.routes_runs import PREFIX, RUN_ROUTES
from services.api.langgraph.routes_stateless import STATELESS_ROUTES
from services.api.langgraph.routes_threads import THREAD_ROUTES


def langgraph_router() -> Router:
    return Router(
        PREFIX,
        route_handlers=[*THREAD_ROUTES, *RUN_ROUTES, *STATELESS_ROUTES],
        opt={API_KEY_HEADER_OPT: True},
        # Documented by LangGraph's own API reference and docs/langgraph.md, not our OpenAPI.
        include_in_schema=False,
    )
