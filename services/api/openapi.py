"""The OpenAPI document tells the truth: every error each route can answer, with its body.

litestar documents validation errors as `{detail, status_code}`; this API answers every
error as `{error, status}` (`app._handle_error`). `document_errors` gives each route the
error statuses it can answer, derived from what the route is (credentials, path ids, query
or body, admin), each with the one error body, and the bearer security its auth middleware
enforces. Called once on the handlers `create_app` registers; it only sets documentation.
`tell_the_truth` then states in the built document what the handlers check themselves,
among it the names of the app's agent system a blueprint may give (`openapi_names.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec
from litestar import Litestar, Response
from litestar._openapi.plugin import OpenAPIPlugin
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Components,
    Link,
    OpenAPI,
    OpenAPIResponse,
    Operation,
    Parameter,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.openapi.spec.enums import OpenAPIType

from agency.contracts.codec import EVENT_TYPES
from agency.contracts.events.thread import END_USER_ID_PATTERN
from agency.contracts.ids import MAX_TOKEN_LENGTH
from agency.services.agents.system import AgentSystem
from agency.services.api.auth import ADMIN_OPT, PUBLIC_OPT
from agency.services.api.openapi_bodies import (
    NUL_FREE_PATH,
    body_components,
    state_tenant_servers,
)
from agency.services.api.openapi_names import state_model_names, state_system_names
from agency.services.api.routes_console import THREAD_STATUSES
from agency.services.api.routes_queries import MAX_EVENTS_PAGE, MAX_SEQ

BEARER = "bearerAuth"
SECURITY_COMPONENTS = Components(
    security_schemes={
        BEARER: SecurityScheme(
            type="http",
            scheme="bearer",
            description="A tenant's API key (`ak_…`), or the admin secret on admin routes.",
        )
    }
)
# Parameters litestar fills from the app, not from the request.
_INJECTED = frozenset({"deps", "principal", "request", "socket", "state", "scope"})


class ErrorBody(msgspec.Struct, frozen=True):
    """Every error: what is wrong, in a sentence, and the status code again."""

    error: str
    status: int


_DESCRIPTIONS = {
    400: "Bad input: malformed JSON, unknown or mistyped fields, invalid ids or query values.",
    401: "No credential, or not a valid one.",
    403: "A credential of the wrong kind (the admin secret on a tenant route, or the "
    "reverse), or a well-formed request an operator's setting forbids: a URL naming an "
    "address no connection made for a tenant may reach (`AGENCY_ALLOW_HOSTS`), a schedule "
    "firing more often than `AGENCY_SCHEDULE_MIN_INTERVAL` lets one fire.",
    404: "No such agency, thread, blueprint (`agentType`), workflow, member, key or dead "
    "letter for this tenant; another tenant's is not found either.",
    409: "The request conflicts with the resource's state (e.g. no run awaits approval).",
    410: "The thread was deleted (`docs/data.md`): alone, with its agency, or with its end "
    "user's threads. The body says when and at whose request.",
    413: "The request body is larger than the configured limit.",
    429: "The tenant is over its rate or active-run limit, or at its share of a saturated "
    "server (`tenant_share_exceeded`); `Retry-After` says when to retry.",
    501: "This deployment does not offer the operation; the message says what to do instead.",
    503: "NATS or the database did not answer in time; retry.",
}


def error_response(status: int, description: str | None = None) -> ResponseSpec:
    return ResponseSpec(
        data_container=ErrorBody,
        description=description or _DESCRIPTIONS[status],
        generate_examples=False,
    )


def empty_response(description: str) -> ResponseSpec:
    """A success without a body (204, or a 202 that has nothing to say)."""
    return ResponseSpec(data_container=None, description=description, generate_examples=False)


def names_a_thread(path: str) -> bool:
    """Whether a route names a thread (in its path, or an AI SDK chat's in its body): one
    deleted answers 410 there."""
    return "{threadId" in path or "{chatId" in path or path.endswith("/chat")


def error_statuses(handler: HTTPRouteHandler) -> list[int]:
    """The error statuses a route answers, from what it is."""
    if handler.opt.get(PUBLIC_OPT):
        return []
    statuses = {401, 403, 503}
    if not handler.opt.get(ADMIN_OPT):
        statuses.add(429)  # a tenant at its share of a saturated server (admission_door.py)
    parameters = set(handler.parsed_fn_signature.parameters) - _INJECTED
    if parameters:
        statuses.add(400)
    if any("{" in path for path in handler.paths):
        statuses.add(404)
    if "data" in parameters:
        statuses.add(413)
    if "POST" in handler.http_methods and any("{" in path for path in handler.paths):
        statuses.add(409)
    if any(names_a_thread(path) for path in handler.paths):
        statuses.add(410)
    return sorted(statuses)


def accepted_later(handler: HTTPRouteHandler) -> ResponseSpec | None:
    """A create (201) answering a `Response[X]` answers 202 with the same body when what it
    wrote is not readable within its wait; None for other routes."""
    returned = handler.parsed_fn_signature.return_type
    if handler.status_code != 201 or not returned.is_subclass_of(Response):
        return None
    if not returned.inner_types:
        return None
    return ResponseSpec(
        data_container=returned.inner_types[0].annotation,
        description="Accepted and stored, but not yet readable within the wait (the read "
        "models are catching up); the body is the same as for 201.",
        generate_examples=False,
    )


def document_errors(handlers: Iterable[object]) -> None:
    """Give every HTTP route its error responses and security; others are left alone."""
    for handler in handlers:
        if not isinstance(handler, HTTPRouteHandler):
            continue
        responses = dict(handler.responses or {})
        later = accepted_later(handler)
        if later is not None:
            responses.setdefault(202, later)
        for status in error_statuses(handler):
            responses.setdefault(status, error_response(status))
        handler.responses = responses
        if handler.opt.get(PUBLIC_OPT):
            handler.security = []
        elif handler.security is None:
            handler.security = [{BEARER: []}]


# What the handlers enforce on parameters they read as text (to answer their own messages),
# stated in the document: ids are subject tokens, positions are counts.
ID_PATTERN = rf"^[A-Za-z0-9_-]{{1,{MAX_TOKEN_LENGTH}}}$"
_TOKEN = rf"[A-Za-z0-9_-]{{1,{MAX_TOKEN_LENGTH}}}"
# A workflow: its id (`wf_…`), or `name` / `name:tag`, `@` in front or not.
WORKFLOW_PATTERN = rf"^@?{_TOKEN}(:{_TOKEN})?$"
# An agent of the agency, `@` in front or not.
AGENT_PATTERN = rf"^@?{_TOKEN}$"


# `type`: known event types, comma-separated, blanks around and between them ignored.
_ONE_TYPE = "(" + "|".join(re.escape(t) for t in sorted(EVENT_TYPES)) + ")"
_TYPE_LIST = rf"^\s*{_ONE_TYPE}?\s*(,\s*{_ONE_TYPE}?\s*)*$"


def _count(low: int, high: int) -> Schema:
    return Schema(type=OpenAPIType.INTEGER, minimum=low, maximum=high)


_PARAMETERS: dict[tuple[str, str], Schema] = {
    ("path", "agencyId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "endUserId"): Schema(type=OpenAPIType.STRING, pattern=END_USER_ID_PATTERN),
    ("path", "threadId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "tenantId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "keyId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "scheduleId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "webhookId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "requestId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "member"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    # A blueprint's name (`GET /agency/{agencyId}/blueprints/{name}`).
    ("path", "name"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("path", "workflow"): Schema(type=OpenAPIType.STRING, pattern=WORKFLOW_PATTERN),
    # Empty means no filter, as absent.
    ("query", "status"): Schema(type=OpenAPIType.STRING, enum=["", *THREAD_STATUSES]),
    ("query", "q"): Schema(type=OpenAPIType.STRING, max_length=64),
    ("query", "tenant"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("query", "reason"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("query", "correlationId"): Schema(type=OpenAPIType.STRING, pattern=ID_PATTERN),
    ("query", "fromSeq"): _count(0, MAX_SEQ),
    ("query", "limit"): _count(1, MAX_EVENTS_PAGE),
    ("header", "Last-Event-ID"): Schema(type=OpenAPIType.STRING, pattern=r"^[0-9]{1,18}$"),
    # `idempotency.header_key`: printable ASCII, no spaces.
    ("header", "Idempotency-Key"): Schema(
        type=OpenAPIType.STRING,
        pattern=r"^[\x21-\x7e]{1,200}$",
        description="The request's idempotency key, when the body has none.",
    ),
    ("query", "type"): Schema(
        type=OpenAPIType.ARRAY,
        items=Schema(type=OpenAPIType.STRING, pattern=_TYPE_LIST),
        description="Event types: repeat the parameter, or separate them with commas "
        "(blanks are ignored).",
    ),
}


def _operations(openapi: OpenAPI) -> Iterable[Operation]:
    for _, _, operation in _routes(openapi):
        yield operation


def _routes(openapi: OpenAPI) -> Iterable[tuple[str, str, Operation]]:
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "put", "post", "delete", "options", "head", "patch", "trace"):
            operation = getattr(item, method, None)
            if isinstance(operation, Operation):
                yield path, method, operation


# What a created agency or thread leads to: its id fills the path of the routes under it
# (every agency has the workflow `global`).
_CREATED = {
    ("/agencies", "post"): {"agencyId": "$response.body#/id", "workflow": "global"},
    ("/agency/{agencyId}/agents", "post"): {
        "agencyId": "$request.path.agencyId",
        "threadId": "$response.body#/id",
    },
}


def _link_created(openapi: OpenAPI) -> None:
    """OpenAPI links from each create to the routes its new id opens."""
    routes = list(_routes(openapi))
    for (created_path, created_method), fills in _CREATED.items():
        source = next(
            (op for path, method, op in routes if (path, method) == (created_path, created_method)),
            None,
        )
        response = (source.responses or {}).get("201") if source else None
        if not isinstance(response, OpenAPIResponse):
            continue
        links: dict[str, Link | Reference] = {}
        for path, _, operation in routes:
            names = set(re.findall(r"{(\w+)}", path))
            if not names or not names <= set(fills) or operation.operation_id is None:
                continue
            if created_path == "/agencies" and "threadId" in names:
                continue
            links[operation.operation_id] = Link(
                operation_id=operation.operation_id,
                parameters={name: fills[name] for name in sorted(names)},
            )
        response.links = links or None


def _body_structs(handlers: Iterable[object]) -> dict[str, msgspec.inspect.StructType]:
    """The request-body structs (and structs inside them), by class name."""
    found: dict[str, msgspec.inspect.StructType] = {}
    seen: set[type] = set()

    def visit(info: msgspec.inspect.Type) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls in seen:
                return
            seen.add(info.cls)
            found[info.cls.__name__] = info
            for field in info.fields:
                visit(field.type)
        for attribute in ("types", "item_type", "value_type", "key_type"):
            inner = getattr(info, attribute, None)
            if isinstance(inner, tuple):
                for item in inner:
                    visit(item)
            elif isinstance(inner, msgspec.inspect.Type):
                visit(inner)

    for handler in handlers:
        if not isinstance(handler, HTTPRouteHandler):
            continue
        data = handler.parsed_fn_signature.parameters.get("data")
        if data is None:
            continue
        try:
            visit(msgspec.inspect.type_info(_body_type(data.annotation)))
        except (TypeError, ValueError):
            continue
    return found


# A body struct that needs exactly one of several fields names them here, each with the
# schema a value must have to count as given (the handler treats null and empty as absent).
ONE_OF = "__exactly_one__"


def exactly_one(schema: Schema, structs: dict[str, msgspec.inspect.StructType], key: str) -> None:
    for name, info in structs.items():
        if key != name and not key.endswith("_" + name):
            continue
        if info.forbid_unknown_fields:
            schema.additional_properties = False
        alternatives: dict[str, Schema] | None = getattr(info.cls, ONE_OF, None)
        if alternatives:
            schema.one_of = [
                Schema(required=[field], properties={field: given})
                for field, given in alternatives.items()
            ]


def _bounded(schema: object) -> bool:
    """The handler declared the parameter with its own bounds (a typed, checked value)."""
    return isinstance(schema, Schema) and any(
        value is not None for value in (schema.maximum, schema.minimum, schema.enum, schema.pattern)
    )


def _body_type(annotation: Any) -> Any:
    """The body type under `JSONBody[...]` (an `Annotated`)."""
    return (
        getattr(annotation, "__origin__", annotation)
        if hasattr(annotation, "__metadata__")
        else annotation
    )


def _optional_body(operation: Operation) -> None:
    """A body the handler takes as `X | None = None` may be left out: not required."""
    body = operation.request_body
    if not isinstance(body, RequestBody):
        return
    for media in (body.content or {}).values():
        schema = media.schema
        alternatives = schema.one_of if isinstance(schema, Schema) else None
        if alternatives and any(
            isinstance(a, Schema) and a.type == OpenAPIType.NULL for a in alternatives
        ):
            body.required = False


def tell_the_truth(
    app: Litestar, handlers: Iterable[object], system: AgentSystem, providers: Iterable[str]
) -> None:
    """State in the built document the constraints the handlers enforce themselves, the
    tags and middleware of the app's agent `system` a blueprint may name and the model
    `providers` it may prefix a model with."""
    openapi = app.plugins.get(OpenAPIPlugin).provide_openapi()
    for operation in _operations(openapi):
        _optional_body(operation)
        for parameter in operation.parameters or []:
            if not isinstance(parameter, Parameter):
                continue
            schema = _PARAMETERS.get((parameter.param_in, parameter.name))
            if schema is not None and not _bounded(parameter.schema):
                parameter.schema = schema
    _link_created(openapi)
    structs = _body_structs(handlers)
    if openapi.components is None:
        openapi.components = Components()
    components = openapi.components.schemas = dict(openapi.components.schemas or {})
    names = {
        name: key
        for key in components
        for name in structs
        if key == name or key.endswith("_" + name)
    }
    components.update(body_components([info.cls for info in structs.values()], names))
    state_tenant_servers(components)
    keys = {info.cls: names.get(name, name) for name, info in structs.items()}
    state_system_names(system, components, keys)
    state_model_names(providers, components, keys)
    for key, schema in components.items():
        if not isinstance(schema, Schema):
            continue
        exactly_one(schema, structs, key)
        files = (schema.properties or {}).get("files")
        if key.endswith("InvokeBody") and isinstance(files, Schema):
            # A file path must hold more than blanks (contracts.limits.path_problem).
            files.property_names = Schema(type=OpenAPIType.STRING, pattern=NUL_FREE_PATH)
