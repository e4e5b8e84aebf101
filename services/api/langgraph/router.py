"""The router of the LangGraph routes, mounted at `/langgraph`."""

from __future__ import annotations

from litestar import Router
from litestar.di import Provide

from agency.services.api.auth import API_KEY_HEADER_OPT
from agency.services.api.langgraph.protocol_ws import PROTOCOL_SOCKET_ROUTES
from agency.services.api.langgraph.routes_assistants import ASSISTANT_ROUTES
from agency.services.api.langgraph.routes_batch import BATCH_ROUTES
from agency.services.api.langgraph.routes_cancel_many import CANCEL_ROUTES
from agency.services.api.langgraph.routes_crons import CRON_ROUTES
from agency.services.api.langgraph.routes_graph import GRAPH_ROUTES
from agency.services.api.langgraph.routes_meta import META_ROUTES
from agency.services.api.langgraph.routes_protocol import PROTOCOL_ROUTES
from agency.services.api.langgraph.routes_runs import PREFIX, RUN_ROUTES
from agency.services.api.langgraph.routes_stateless import STATELESS_ROUTES
from agency.services.api.langgraph.routes_store import STORE_ROUTES
from agency.services.api.langgraph.routes_thread_admin import THREAD_ADMIN_ROUTES
from agency.services.api.langgraph.routes_thread_state import THREAD_STATE_ROUTES
from agency.services.api.langgraph.routes_threads import THREAD_ROUTES
from agency.services.api.langgraph.scope import provide_agency_caller
from agency.services.api.langgraph.thread_stream import THREAD_STREAM_ROUTES


def langgraph_router() -> Router:
    return Router(
        PREFIX,
        route_handlers=[
            *THREAD_ROUTES,
            *RUN_ROUTES,
            *STATELESS_ROUTES,
            *ASSISTANT_ROUTES,
            *GRAPH_ROUTES,
            *THREAD_ADMIN_ROUTES,
            *THREAD_STATE_ROUTES,
            *STORE_ROUTES,
            *CRON_ROUTES,
            *BATCH_ROUTES,
            *CANCEL_ROUTES,
            *META_ROUTES,
            *THREAD_STREAM_ROUTES,
            *PROTOCOL_ROUTES,
            *PROTOCOL_SOCKET_ROUTES,
        ],
        dependencies={"caller": Provide(provide_agency_caller, sync_to_thread=False)},
        opt={API_KEY_HEADER_OPT: True},
        # Documented by LangGraph's own API reference and docs/langgraph.md, not our OpenAPI.
        include_in_schema=False,
    )
