"""The HTTP API: `create_app(deps)` builds it; nothing happens at import.

Every error a client can cause answers 4xx with `{"error": "<what is wrong>", "status": N}`;
a failure of ours answers 500 (503 when NATS does not answer in time) without details.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import msgspec
import structlog
from litestar import Litestar, Request, Response, Router, get
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.openapi import OpenAPIConfig
from nats.errors import Error as NatsError

from agency.contracts.errors import InvalidToken
from agency.contracts.version import package_version
from agency.infra import db
from agency.infra.jetstream.errors import StoreError, StoreTimeout
from agency.services.api.a2a.router import a2a_router
from agency.services.api.admission_door import AdmissionMiddleware
from agency.services.api.agui.routes import agui_router
from agency.services.api.aisdk import aisdk_router
from agency.services.api.auth import PUBLIC_OPT, AuthMiddleware, Deps, provide_principal
from agency.services.api.bodies import strict_body
from agency.services.api.console.pages import CONSOLE_PAGES
from agency.services.api.cors import CorsMiddleware, cors_headers
from agency.services.api.deps import ApiDeps
from agency.services.api.forwarded import ForwardedMiddleware
from agency.services.api.guards import PathGuard
from agency.services.api.langgraph.router import langgraph_router
from agency.services.api.mcp.server import AgencyMcp
from agency.services.api.openapi import (
    SECURITY_COMPONENTS,
    document_errors,
    error_response,
    tell_the_truth,
)
from agency.services.api.options import AllowMiddleware
from agency.services.api.revocation import RevocationMiddleware
from agency.services.api.routes_archive import ARCHIVE_ROUTES
from agency.services.api.routes_budget import BUDGET_ROUTES
from agency.services.api.routes_commands import COMMAND_ROUTES
from agency.services.api.routes_console import CONSOLE_ROUTES
from agency.services.api.routes_control import CONTROL_ROUTES
from agency.services.api.routes_encryption import ENCRYPTION_ROUTES
from agency.services.api.routes_erasure import ERASURE_ROUTES
from agency.services.api.routes_fork import FORK_ROUTES
from agency.services.api.routes_keys import KEY_ROUTES
from agency.services.api.routes_ops import OPS_ROUTES
from agency.services.api.routes_providers import PROVIDER_ROUTES
from agency.services.api.routes_push_deliveries import push_deliveries
from agency.services.api.routes_queries import QUERY_ROUTES
from agency.services.api.routes_retention import RETENTION_ROUTES
from agency.services.api.routes_run import RUN_ROUTES
from agency.services.api.routes_settings import SETTINGS_ROUTES
from agency.services.api.routes_tenants import TENANT_ROUTES
from agency.services.api.routes_usage import USAGE_ROUTES
from agency.services.api.routes_variables import VARIABLE_ROUTES
from agency.services.api.routes_webhooks import WEBHOOK_ROUTES
from agency.services.api.schema_page import ONLY_THIS_HOST, schema_pages
from agency.services.api.streaming import CLOSING, STREAM_ROUTES
from agency.services.threads.erasure import ThreadGone
from agency.services.workflows.http.routes import WORKFLOW_ROUTES

log = structlog.get_logger(__name__)


class Health(msgspec.Struct, frozen=True):
    status: str


@get("/healthz", opt={PUBLIC_OPT: True}, summary="Liveness: the process answers")
async def healthz() -> Health:
    return Health(status="ok")


class Readiness(msgspec.Struct, frozen=True, omit_defaults=True):
    status: str
    services: dict[str, str] | None = None


@get(
    "/readyz",
    opt={PUBLIC_OPT: True},
    summary=(
        "Readiness: NATS connected, the event stream answers (it has a leader), the database"
        " answers, every supervised service running"
    ),
    responses={503: error_response(503, "Not ready: what is missing.")},
)
async def readyz(deps: Deps) -> Response[Any]:
    problems: list[str] = []
    try:
        connected = deps.bus.nc.is_connected
    except AssertionError:  # the Bus asserts it was connected at all
        connected = False
    if not connected:
        problems.append("NATS is not connected")
    else:
        try:  # answered by the stream's leader: none while a cluster elects one
            async with asyncio.timeout(2.0):
                for stream in deps.bus.layout.streams:
                    await deps.bus.js.stream_info(stream)
        except (TimeoutError, NatsError) as e:
            problems.append(f"the event stream does not answer: {type(e).__name__}: {e}")
    try:
        async with asyncio.timeout(2.0):
            await deps.pool.fetchval("SELECT 1")
    except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:
        problems.append(f"database does not answer: {type(e).__name__}: {e}")
    services = dict(deps.services()) if deps.services is not None else None
    for name, state in (services or {}).items():
        if state != "running":
            problems.append(f"service {name} is {state}")
    if problems:
        body: dict[str, Any] = {"error": "; ".join(problems), "status": 503}
        if services is not None:
            body["services"] = services
        return Response(body, status_code=503)
    return Response(Readiness(status="ready", services=services))


def create_app(deps: ApiDeps) -> Litestar:
    def provide_deps() -> ApiDeps:
        return deps

    mcp = AgencyMcp(deps)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with (
            deps.keys.watching(deps.bus.nc, deps.pool),
            deps.known.watching(deps.bus.nc),
            deps.metrics.watching(deps.bus.nc),
            deps.limiter.watching(deps.bus.nc),
            deps.relief.relieving(),
            deps.progress.listening_while(),
            mcp.running(app),
        ):
            yield

    handlers = [
        *QUERY_ROUTES,
        *COMMAND_ROUTES,
        *CONTROL_ROUTES,
        *VARIABLE_ROUTES,
        *SETTINGS_ROUTES,
        *FORK_ROUTES,
        *ERASURE_ROUTES,
        *TENANT_ROUTES,
        *ARCHIVE_ROUTES,
        *KEY_ROUTES,
        *ENCRYPTION_ROUTES,
        *PROVIDER_ROUTES,
        *BUDGET_ROUTES,
        *RETENTION_ROUTES,
        *USAGE_ROUTES,
        *OPS_ROUTES,
        *STREAM_ROUTES,
        *WORKFLOW_ROUTES,
        *RUN_ROUTES,
        *WEBHOOK_ROUTES,
        push_deliveries,
        *CONSOLE_ROUTES,
        *CONSOLE_PAGES,
        healthz,
        readyz,
    ]
    document_errors(handlers)
    app = Litestar(
        # `/mcp` speaks MCP, not the API's JSON, and the LangGraph-compatible routes follow
        # LangGraph's own API reference: both stay out of the OpenAPI document.
        route_handlers=[
            *handlers,
            *mcp.routes(),
            langgraph_router(),
            aisdk_router(),
            agui_router(),
            a2a_router(),
        ],
        dependencies={
            "deps": Provide(provide_deps, sync_to_thread=False, use_cache=True),
            "principal": Provide(provide_principal, sync_to_thread=False),
        },
        # A trusted proxy's `X-Forwarded-*` first (what the client asked for); preflights
        # are answered before authentication: a browser sends no key on one.
        middleware=[
            ForwardedMiddleware(deps.settings.trusted_proxies),
            CorsMiddleware(deps.settings.cors),
            PathGuard(),
            AllowMiddleware(),
            AuthMiddleware(deps),
            AdmissionMiddleware(deps.admission),
            RevocationMiddleware(deps.keys),
        ],
        before_request=strict_body,
        before_send=[cors_headers(deps.settings.cors)] if deps.settings.cors.enabled else [],
        exception_handlers={Exception: _handle_error},
        request_max_body_size=deps.settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="Agency API",
            version=package_version(),
            description=(
                "Agents for many tenants. Authenticate with `Authorization: Bearer <api key>` "
                "(or `X-SECRET` in a single-tenant set-up). Every error answers "
                "`{error, status}`. Request bodies are checked strictly against their schemas; "
                "text in them must not contain NUL (`\\u0000`). Events: see `docs/api.md`."
            ),
            components=SECURITY_COMPONENTS,
            render_plugins=schema_pages(),
            # The docs are public: the router's opt reaches its handlers.
            openapi_router=Router(
                "/schema",
                route_handlers=[],
                opt={PUBLIC_OPT: True},
                include_in_schema=False,
                response_headers=[ONLY_THIS_HOST],
            ),
        ),
        state=State({CLOSING: asyncio.Event()}),
        lifespan=[lifespan],
        # The process logs through structlog (`services/observability/logging.py`); litestar's
        # default config would turn the root logger up to INFO, and every library in the
        # process (the model's HTTP client among them) would print a line per request.
        logging_config=None,
    )
    tell_the_truth(app, handlers, deps.system, deps.models.known)
    return app


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response({"error": message, "status": status}, status_code=status, headers=headers)


def _handle_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    # Our own 501s and 503s say what is missing; other 5xx details stay in the log.
    if isinstance(exc, HTTPException) and (exc.status_code < 500 or exc.status_code in (501, 503)):
        return _error(exc.status_code, _client_message(request, exc), exc.headers)
    if isinstance(exc, InvalidToken):
        return _error(400, str(exc))
    if isinstance(exc, ThreadGone):
        return gone(exc)
    if isinstance(exc, StoreTimeout | NatsError | TimeoutError):
        log.warning("event store did not answer", path=request.url.path, error=str(exc))
        return _error(503, "the event store did not answer in time; retry the request")
    if db.is_transient(exc):
        log.warning("database unavailable", path=request.url.path, error=str(exc))
        return _error(503, "the database is unavailable; retry the request")
    if isinstance(exc, StoreError):
        log.error("event store error", path=request.url.path, error=str(exc))
    else:
        log.exception("unhandled error", path=request.url.path, exc_info=exc)
    return _error(500, "internal server error")


def gone(exc: ThreadGone) -> Response[Any]:
    """410 for a deleted thread: when, and at whose request (docs/data.md)."""
    deletion = exc.deletion
    body = {
        "error": str(exc),
        "status": 410,
        "deleted": True,
        "deletedAt": msgspec.to_builtins(deletion.deleted_at),
        "requestedBy": deletion.requested_by,
    }
    return Response(body, status_code=410)


def _client_message(request: Request[Any, Any, Any], exc: HTTPException) -> str:
    if exc.status_code == 413:
        limit = request.route_handler.resolve_request_max_body_size()
        return f"request body too large: the limit is {limit} bytes"
    if exc.status_code == 404 and exc.detail == "Not Found":
        return f"no route {request.method} {request.url.path}"
    if exc.status_code == 405:
        return f"method {request.method} is not allowed on {request.url.path}"
    if isinstance(exc.__cause__, SerializationException):
        return f"request body is not valid JSON: {exc.detail}"
    if isinstance(exc, ValidationException) and isinstance(exc.extra, list) and exc.extra:
        names = _http_names(request)
        return "; ".join(_problem(item, names) for item in exc.extra)
    return exc.detail


def _http_names(request: Request[Any, Any, Any]) -> dict[str, str]:
    """The handler's parameters by their Python names (`from_seq`) → their HTTP names."""
    names: dict[str, str] = {}
    for name, parameter in request.route_handler.parsed_fn_signature.parameters.items():
        alias = getattr(parameter.kwarg_definition, "name", None)
        if isinstance(alias, str) and alias:
            names[name] = alias
    return names


def _problem(item: Any, names: dict[str, str]) -> str:
    """One validation problem as a sentence naming where it is."""
    if not isinstance(item, dict):
        return str(item)
    message = str(item.get("message", "invalid value"))
    key = item.get("key")
    source = getattr(item.get("source"), "value", item.get("source"))
    if source == "body":
        if message == "'data'":
            return "a JSON request body is required"
        # litestar names the whole body after the handler's `data` parameter.
        where = "request body" if key in (None, "", "data") else f"request body field {key!r}"
    elif key:
        # litestar names it as the handler does (`from_seq`); say the name HTTP uses.
        where = f"{source} parameter {names.get(str(key), key)!r}"
    else:
        return message
    return f"{where}: {message}"
