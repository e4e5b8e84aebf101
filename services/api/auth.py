"""Who is calling, and may they touch this agency or thread.

Credentials, checked in this order:
- `Authorization: Bearer <admin secret>`: the admin (`Principal(admin=True)`), for admin
  routes such as `POST /tenants`;
- `Authorization: Bearer ak_<key_id>_<secret>`: a tenant's API key. Only its sha256 hex is
  stored (the tenants read model, `projections.agency_queries.tenant_for_key`). The hash is
  compared by the database: a caller controls the key, not its hash, so the timing of
  that compare tells nothing. The admin and shared secrets are compared in constant time;
- `X-SECRET: <shared secret>`: the seed's single-tenant set-up, mapped to one tenant;
- `?access_token=<key>` on the stream route only, because a browser's `EventSource` cannot
  send headers. A query string ends up in access logs, so nothing else accepts it;
- `x-api-key: <key>` on the LangGraph-compatible routes only (`/langgraph/…`), the header
  the `langgraph-sdk` client sends.

A missing and a wrong credential get the same 401, so a caller learns nothing about keys.
Ownership is checked against the log: subjects are tenant-scoped, so another tenant's
agency or thread is simply not found (404), and a resource created a moment ago is found
even while the read models catch up.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

import asyncpg
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.enums import ScopeType
from litestar.exceptions import (
    HTTPException,
    NotAuthorizedException,
    NotFoundException,
    PermissionDeniedException,
    ServiceUnavailableException,
    ValidationException,
)
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send
from nats.js.errors import NotFoundError

from agency.contracts.codec import readable_event
from agency.contracts.errors import InvalidToken
from agency.contracts.events import (
    AgencyDeleted,
    BlueprintDeleted,
    BlueprintSaved,
    BlueprintSpec,
    ThreadCreated,
    ThreadTerminated,
)
from agency.contracts.ids import new_id, validate_token
from agency.contracts.subjects import EVENT_TYPE_HEADER
from agency.infra.jetstream.records import RecordedEvent
from agency.projections.agency_queries import tenant_for_key
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.revocation import deny_websocket
from agency.services.api.tenant_scope import current_tenant
from agency.services.threads.erasure import refuse_if_deleted

KEY_PREFIX = "ak_"
UNAUTHORIZED = "missing or invalid credentials: send 'Authorization: Bearer <api key>'"
# Where the key may also come as `x-api-key` (the LangGraph SDK's header).
UNAUTHORIZED_KEY_HEADER = (
    "missing or invalid credentials: send a tenant's API key as 'x-api-key' "
    "(or 'Authorization: Bearer <api key>')"
)
ADMIN_TENANT = ""  # the admin acts for no tenant
ADMIN_ON_TENANT_ROUTE = (
    "the admin credential acts for no tenant: call tenant routes with a tenant's API key"
)
# Route handlers with this opt key accept `?access_token=` (EventSource cannot send headers).
QUERY_TOKEN_OPT = "query_token"
# Route handlers with this opt key also accept the key as `x-api-key` (the LangGraph SDK's).
API_KEY_HEADER_OPT = "api_key_header"
# Route handlers with this opt key need no credential.
PUBLIC_OPT = "public"
# Route handlers with this opt key are for the admin; every other route refuses the admin.
ADMIN_OPT = "admin"

# How handlers declare the two dependencies `create_app` registers (the path ids are
# `services/api/path_params.py`).
Caller = NamedDependency[Principal]
Deps = NamedDependency[ApiDeps]


def mint_api_key() -> tuple[str, str, str]:
    """A new key as `(key, key_id, key_hash)`; the key is shown once and never stored."""
    key_id = new_id().lower()
    key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(24)}"
    return key, key_id, hash_key(key)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key: str) -> str | None:
    """The key id of a well-formed key; the secret may itself contain `_`, the id never."""
    if not key.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = key[len(KEY_PREFIX) :].partition("_")
    if not sep or not secret or len(key) > 200:
        return None
    try:
        return validate_token("key id", key_id)
    except InvalidToken:
        return None


async def principal_for(deps: ApiDeps, token: str | None, shared: str | None) -> Principal | None:
    """The principal a bearer token or `X-SECRET` value stands for, or None."""
    settings = deps.settings
    if token:
        if settings.admin_secret and _same(token, settings.admin_secret):
            return Principal(tenant_id=ADMIN_TENANT, admin=True)
        key_id = key_id_of(token)
        if key_id is not None:
            tenant = await tenant_of_key(deps, key_id, hash_key(token))
            if tenant is not None:
                return Principal(tenant_id=tenant, key_id=key_id)
    tenant = settings.shared_secret_tenant
    if shared and settings.shared_secret and tenant and _same(shared, settings.shared_secret):
        return Principal(tenant_id=tenant)
    return None


async def tenant_of_key(deps: ApiDeps, key_id: str, key_hash: str) -> str | None:
    """The tenant of a live key: cached for a few seconds, refused the moment it is revoked."""
    return await deps.keys.tenant_of(key_id, key_hash, lambda i, h: lookup_key(deps, i, h))


async def lookup_key(deps: ApiDeps, key_id: str, key_hash: str) -> str | None:
    try:
        async with deps.pool.acquire() as conn:
            return await tenant_for_key(conn, key_id, key_hash)
    except asyncpg.UndefinedTableError as e:
        raise ServiceUnavailableException(
            "the tenants read model does not exist yet: is the projector running?"
        ) from e


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def _bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class AuthMiddleware(ASGIMiddleware):
    """Puts the caller's `Principal` in `scope["user"]` or refuses the connection."""

    exclude_opt_key = PUBLIC_OPT

    def __init__(self, deps: ApiDeps) -> None:
        self._deps = deps

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        connection: ASGIConnection[Any, Any, Any, Any] = ASGIConnection(scope)
        token = _bearer(connection)
        route_handler = scope.get("route_handler")
        if token is None and route_handler is not None and route_handler.opt.get(QUERY_TOKEN_OPT):
            token = connection.query_params.get("access_token") or None
        if (
            token is None
            and route_handler is not None
            and route_handler.opt.get(API_KEY_HEADER_OPT)
        ):
            token = connection.headers.get("x-api-key") or None
        principal = await principal_for(self._deps, token, connection.headers.get("x-secret"))
        admin_route = route_handler is not None and bool(route_handler.opt.get(ADMIN_OPT))
        refusal: HTTPException | None = None
        if principal is None:
            key_header = route_handler is not None and route_handler.opt.get(API_KEY_HEADER_OPT)
            message = UNAUTHORIZED_KEY_HEADER if key_header else UNAUTHORIZED
            refusal = NotAuthorizedException(message, headers={"WWW-Authenticate": "Bearer"})
        elif principal.admin and not admin_route:
            refusal = PermissionDeniedException(ADMIN_ON_TENANT_ROUTE)
        elif admin_route and not principal.admin:
            refusal = PermissionDeniedException("this route needs the admin credential")
        if refusal is None:
            assert principal is not None
            scope["user"] = principal
            # The request's database sessions read as its tenant (row-level security).
            scoped = current_tenant.set(None if principal.admin else principal.tenant_id)
            try:
                # Admitted (`admission_door.py`), a key's request is then served until the
                # key is revoked (`RevocationMiddleware`).
                await next_app(scope, receive, send)
            finally:
                current_tenant.reset(scoped)
        elif scope["type"] == ScopeType.WEBSOCKET:
            await deny_websocket(scope, send, refusal.status_code, refusal.detail)
        else:
            raise refusal


def provide_principal(scope: Scope) -> Principal:
    principal = scope.get("user")
    if not isinstance(principal, Principal):
        # A handler asked for a principal on a public route: a wiring mistake, still a 401.
        raise NotAuthorizedException(UNAUTHORIZED)
    return principal


def tenant_of(principal: Principal) -> str:
    """The tenant a tenant route acts for; the admin has none."""
    if principal.admin:
        raise PermissionDeniedException(ADMIN_ON_TENANT_ROUTE)
    return principal.tenant_id


def tenant_and_agency(principal: Principal, agency_id: str) -> tuple[str, str]:
    """The tenant a tenant route acts for and the agency id of its path, checked."""
    return tenant_of(principal), path_id("agency id", agency_id)


def require_admin(principal: Principal) -> None:
    if not principal.admin:
        raise PermissionDeniedException("this route needs the admin credential")


def path_id(kind: str, value: str) -> str:
    """A path parameter that will become a subject token, or 400 naming the problem."""
    try:
        return validate_token(kind, value)
    except InvalidToken as e:
        raise ValidationException(str(e)) from e


async def agency_events(deps: ApiDeps, tenant: str, agency_id: str) -> list[RecordedEvent]:
    """The agency's events, or 404 when this tenant has no such agency."""
    path_id("agency id", agency_id)
    events = await deps.bus.store.read(tenant, "agency", agency_id)
    if not any(e.type == "agency.created" for e in events) or (
        events and isinstance(events[-1].payload, AgencyDeleted)
    ):
        raise NotFoundException(f"agency {agency_id} not found")
    return events


async def agency_owned(deps: ApiDeps, tenant: str, agency_id: str) -> None:
    """404 unless this tenant has the agency: one direct get of its last event (none, or
    `agency.deleted`: not found), for routes that need the agency to exist but none of its
    events. One found is not read again (`deps.known`): a process that kept an agency
    deleted since lets its requests through, and the registry refuses threads in it."""
    path_id("agency id", agency_id)
    if deps.known.has_agency(tenant, agency_id):
        return
    subject = deps.bus.store.subject(tenant, "agency", agency_id)
    stream = deps.bus.store.stream_of(agency_id)
    try:
        msg = await deps.bus.js.get_last_msg(stream, subject, direct=True)
    except NotFoundError:
        raise NotFoundException(f"agency {agency_id} not found") from None
    if (msg.headers or {}).get(EVENT_TYPE_HEADER) == "agency.deleted":
        raise NotFoundException(f"agency {agency_id} not found: it was deleted")
    deps.known.found_agency(tenant, agency_id)


def agent_types(deps: ApiDeps, events: list[RecordedEvent]) -> dict[str, BlueprintSpec]:
    """Blueprints a thread of this agency may use: static ones, overridden by the agency's."""
    static = deps.system.blueprints
    types = dict(static)
    for e in events:
        match e.payload:
            case BlueprintSaved(blueprint=spec):
                types[spec.name] = spec
            case BlueprintDeleted(name=name) if name in static:
                types[name] = static[name]
            case BlueprintDeleted(name=name):
                types.pop(name, None)
    return types


async def require_agent_type(deps: ApiDeps, tenant: str, agency_id: str, agent_type: str) -> None:
    """404 unless this tenant has the agency and a thread of it may use `agent_type`. A
    static blueprint's name always may (deleting the agency's own blueprint of that name
    brings the static one back), and one of the agency's own found a moment ago is kept
    (`deps.known`), so only another name reads the agency's log."""
    if agent_type in deps.system.blueprints or deps.known.has_blueprint(
        tenant, agency_id, agent_type
    ):
        await agency_owned(deps, tenant, agency_id)
        return
    known = agent_types(deps, await agency_events(deps, tenant, agency_id))
    if agent_type not in known:
        # A well-formed request naming a blueprint that is not there: not found.
        raise NotFoundException(
            f"unknown agentType {agent_type!r}: agency {agency_id} has "
            f"{', '.join(sorted(known)) or 'no blueprints'}; save a blueprint first"
        )
    deps.known.found_blueprint(tenant, agency_id, agent_type)


async def thread_created(
    deps: ApiDeps, tenant: str, agency_id: str | None, thread_id: str
) -> ThreadCreated:
    """The thread's creation event, or 404 unless the thread is this tenant's, in this agency
    (in any of its agencies when `agency_id` is None).

    One direct get of the first message on the thread's subject: a thread's first event is
    its `thread.created`, and it names the agency.
    """
    if agency_id is not None:
        path_id("agency id", agency_id)
    path_id("thread id", thread_id)
    subject = deps.bus.store.subject(tenant, "thread", thread_id)
    where = f" in agency {agency_id}" if agency_id is not None else ""
    not_found = NotFoundException(f"thread {thread_id} not found{where}")
    try:
        msg = await deps.bus.js.get_msg(
            deps.bus.store.stream_of(thread_id), seq=1, subject=subject, next=True, direct=True
        )
    except NotFoundError:
        raise not_found from None
    envelope = readable_event(msg.data or b"")
    payload = envelope.payload if envelope is not None else None
    if not isinstance(payload, ThreadCreated):
        # Its creation unreadable: a deleted thread's (410) or garbage (404).
        await refuse_if_deleted(deps.bus, tenant, thread_id)
        raise not_found
    if agency_id is not None and payload.agency_id != agency_id:
        raise not_found
    return payload


async def thread_terminated(deps: ApiDeps, tenant: str, thread_id: str) -> ThreadTerminated | None:
    """The thread's `thread.terminated`, if it was terminated (at most once). The thread as
    the process keeps it folded tells, read on from where it stood; a deleted thread (which
    folds as terminated, whether it was or not) is looked up in its log."""
    state = await deps.threads.load(tenant, thread_id)
    if not state.deleted:
        return ThreadTerminated(reason=state.terminated_reason) if state.terminated else None
    subject = deps.bus.store.subject(tenant, "thread", thread_id)
    stream = deps.bus.store.stream_of(thread_id)
    try:
        msg = await deps.bus.js.get_msg(stream, subject=subject, direct=True)
    except NotFoundError:
        return None
    envelope = readable_event(msg.data or b"")
    payload = envelope.payload if envelope is not None else None
    if isinstance(payload, ThreadTerminated):
        return payload
    for event in await deps.bus.store.read(tenant, "thread", thread_id):
        if isinstance(event.payload, ThreadTerminated):
            return event.payload
    return None
