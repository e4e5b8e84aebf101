"""Routes that change something: each sends one command onto the bus.

Creates wait (bounded by `read_your_writes_timeout`) until the read models have applied
what the command produced, so the caller can read what it wrote: 201. When the wait runs
out the command is still stored and will be applied: 202 with the same body. Everything
else answers 202 as soon as the command is stored.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, post
from litestar.exceptions import ClientException, ValidationException
from litestar.params import JSONBody

from agency.contracts.commands import CreateAgency, CreateTenant
from agency.contracts.envelope import utc_now
from agency.contracts.events import ChatMessage
from agency.contracts.events.thread import ConcurrencyStrategy, EndUserId
from agency.contracts.http import Out, RunAccepted, ThreadOut
from agency.contracts.ids import new_id
from agency.contracts.limits import limits, path_problem
from agency.infra.keystore import new_root_id
from agency.projections.agency_queries import AgencyView
from agency.services.agents.checks import naming_problems, problems_with_inline, unguarded_names
from agency.services.agents.code import SettingsError
from agency.services.api.auth import (
    ADMIN_OPT,
    Caller,
    Deps,
    agency_owned,
    mint_api_key,
    require_admin,
    require_agent_type,
    tenant_and_agency,
    tenant_of,
    thread_created,
    thread_terminated,
)
from agency.services.api.blueprint_body import BlueprintOut, SaveBlueprintBody, blueprint_out
from agency.services.api.idempotency import IdempotencyKey, KeyHeader, header_key
from agency.services.api.model_check import model_problem
from agency.services.api.openapi import error_response
from agency.services.api.path_params import AgencyId, ThreadId
from agency.services.api.readback import send_and_read, send_blueprint
from agency.services.api.run_start import refuse_if_limited, start_run
from agency.services.api.runstatus import RunStatuses, Seen
from agency.services.api.text import refuse_nul
from agency.services.api.thread_create import create_root_thread
from agency.services.tenancy.door_limits import messages_problem

NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
# A file path: not blank, within the default limit (`AGENCY_MAX_PATH_CHARS` may lower it).
# Whitespace spelt out: Python's `\s` and JSON Schema's (ECMA's) differ on a few characters
# (\x1c to \x1f, \x85, \ufeff), and the documented pattern must refuse what the route does.
_SPACE = r"\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
FilePath = Annotated[str, msgspec.Meta(min_length=1, max_length=512, pattern=f"[^{_SPACE}]")]


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Request bodies: camelCase on the wire, unknown fields refused, no NUL in any text."""

    def __post_init__(self) -> None:
        refuse_nul(self)


class CreateTenantBody(Body, frozen=True, kw_only=True):
    name: NonEmpty


class TenantOut(Out, frozen=True, kw_only=True):
    tenant_id: str
    api_key: str
    name: str


class CreateAgencyBody(Body, frozen=True, kw_only=True):
    name: NonEmpty
    metadata: dict[str, str] = {}


class MessageIn(Body, frozen=True, kw_only=True):
    content: str
    role: Literal["user", "system", "assistant"] = "user"


class RunInput(Body, frozen=True, kw_only=True):
    """What a run starts with: messages and files, within one request's limits."""

    messages: list[MessageIn] = []
    files: dict[FilePath, str] = {}
    idempotency_key: IdempotencyKey | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for path in self.files:
            problem = path_problem(path, limits().max_path_chars)
            if problem is not None:
                raise ValueError(f"`files`: {problem}")
        size = sum(len(m.content.encode()) for m in self.messages) + sum(
            len(p.encode()) + len(c.encode()) for p, c in self.files.items()
        )
        if size > limits().max_request_bytes:
            raise ValueError(
                f"messages and files of {size} bytes exceed the {limits().max_request_bytes} "
                "bytes one request can carry; write large content in parts"
            )

    @property
    def starts_run(self) -> bool:
        return bool(self.messages or self.files)

    def chat(self) -> tuple[ChatMessage, ...]:
        return tuple(ChatMessage(role=m.role, content=m.content) for m in self.messages)


class CreateThreadBody(RunInput, frozen=True, kw_only=True):
    """With `messages` or `files`, the thread's first run starts in the same request."""

    agent_type: NonEmpty
    metadata: dict[str, str] = {}
    # The end user the thread serves (`agency users export` gathers their threads).
    end_user_id: EndUserId | None = None


class InvokeBody(RunInput, frozen=True, kw_only=True):
    """Seed 000's InvokeBody: `threadId` and `agentType`, when given, must name this thread
    and its agent type."""

    thread_id: str | None = None
    agent_type: str | None = None
    strategy: ConcurrencyStrategy = "queue"


class Accepted(Out, frozen=True, kw_only=True):
    status: Literal["accepted"] = "accepted"


@post(
    "/tenants",
    status_code=201,
    opt={ADMIN_OPT: True},
    summary="Create a tenant and its first API key (admin)",
    description="The key is shown once; only its sha256 is stored.",
)
async def create_tenant(
    data: JSONBody[CreateTenantBody], principal: Caller, deps: Deps
) -> Response[TenantOut]:
    require_admin(principal)
    tenant = new_id().lower()
    key, key_id, key_hash = mint_api_key()
    command = CreateTenant(name=data.name, key_id=key_id, key_hash=key_hash)
    # The tenant's id is the command's key: answered once the key can be looked up.
    written = await send_and_read(deps, tenant, "tenant", tenant, command, tenant)
    body = TenantOut(tenant_id=tenant, api_key=key, name=data.name)
    return Response(body, status_code=201 if written.readable else 202)


@post("/agencies", status_code=201, summary="Create an agency")
async def create_agency(
    data: JSONBody[CreateAgencyBody], principal: Caller, deps: Deps
) -> Response[AgencyView]:
    tenant = tenant_of(principal)
    agency_id = new_id()
    command = CreateAgency(agency_id=agency_id, name=data.name, metadata=data.metadata)
    written = await send_and_read(deps, tenant, "agency", agency_id, command)
    created_at = written.event.envelope.ts if written.event else utc_now()
    body = AgencyView(id=agency_id, name=data.name, metadata=data.metadata, created_at=created_at)
    return Response(body, status_code=201 if written.readable else 202)


@post(
    "/agency/{agencyId:str}/blueprints",
    status_code=201,
    summary="Save a blueprint of the agency (overrides a static one of the same name)",
)
async def save_blueprint(
    agency_id: AgencyId, data: JSONBody[SaveBlueprintBody], principal: Caller, deps: Deps
) -> Response[BlueprintOut]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await agency_owned(deps, tenant, agency_id)  # not its history: a save costs the same
    spec = data.spec()
    problems = problems_with_inline(deps.system, spec, check=naming_problems)
    if problems:
        raise ValidationException("; ".join(problems))
    warnings = problems_with_inline(deps.system, spec, check=unguarded_names)
    problem = await model_problem(deps, tenant, spec.model)
    if problem is not None:
        raise ValidationException(f"field 'model': {problem}")
    code = deps.system.code_agent_for(spec.name)
    if code is not None:
        try:
            code.settings_for(spec)
        except SettingsError as e:
            raise ValidationException(str(e)) from e
    readable, revision = await send_blueprint(deps, tenant, agency_id, spec)
    return Response(blueprint_out(spec, revision, warnings), status_code=201 if readable else 202)


@post(
    "/agency/{agencyId:str}/agents",
    status_code=201,
    summary="Create a thread",
    description=(
        "Without `messages` or `files`: 201 once the thread is listed (202 if the read "
        "models have not listed it within the read-your-writes wait). With them: the thread "
        "is created and its first run started in one request, as an invoke would start it "
        "(`runId`, and `runStatus` once the runtime took the run up, `pending` if it had "
        "not yet); 202, without waiting for the thread to be listed (a list from this "
        "process still shows it)."
    ),
    responses={429: error_response(429)},
)
async def create_thread(
    agency_id: AgencyId,
    data: JSONBody[CreateThreadBody],
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, Any],
    idempotency_header: KeyHeader = None,
) -> Response[ThreadOut]:
    tenant, agency_id = tenant_and_agency(principal, agency_id)
    await require_agent_type(deps, tenant, agency_id, data.agent_type)
    messages = data.chat()
    if data.starts_run:
        # Refused before the thread exists: a request that cannot start its run creates
        # nothing.
        if (problem := messages_problem(messages, deps.door)) is not None:
            raise ValidationException(problem)
        await deps.limiter.admit(deps.pool, tenant)
    thread_id = new_root_id(tenant)
    # The event has no metadata field of its own; the request context carries it.
    context = {**data.metadata, **_request_context(request)}
    created = await create_root_thread(
        deps, tenant, agency_id, thread_id, data.agent_type, context,
        listed=not data.starts_run, end_user_id=data.end_user_id,
    )  # fmt: skip
    body = ThreadOut(
        id=thread_id,
        agent_type=data.agent_type,
        agency_id=agency_id,
        created_at=created.event.envelope.ts,
        metadata=data.metadata,
    )
    if not data.starts_run:
        return Response(body, status_code=201 if created.listed else 202)
    key = data.idempotency_key or header_key(idempotency_header) or new_id()
    # The new thread's log holds its creation alone: the wait for the run reads on from it.
    seen = Seen(runs=RunStatuses(), position=created.event.position)
    run = await start_run(
        deps, tenant, agency_id, thread_id, key, messages, data.files, "queue", seen=seen
    )
    started = msgspec.structs.replace(body, run_id=run.run_id, run_status=run.status)
    return Response(started, status_code=202)


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/invoke",
    status_code=202,
    summary="Start a run with new messages and files",
    description=(
        "The idempotency key comes from the body or the `Idempotency-Key` header (the body "
        "wins). The same key always answers the same runId and starts at most one run. "
        "The answer waits (briefly, bounded) for the runtime to take the run up and gives "
        "its status: `running`, `queued` (behind the thread's active run), `rejected` "
        "(strategy `reject` while a run is active), `paused`, `completed`, `canceled`, "
        "`error`; `pending` when the runtime has not answered yet. A terminated thread "
        "answers 409. A run refused for the tenant's limits or share answers 429 with "
        "`Retry-After`, and binds no key: the same key sent again later may start it."
    ),
    responses={
        409: error_response(
            409, "The thread is terminated, or the body's threadId or agentType is not its."
        ),
        429: error_response(429),
    },
)
async def invoke(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    data: JSONBody[InvokeBody | None] = None,
    idempotency_header: KeyHeader = None,
) -> RunAccepted:
    tenant = tenant_of(principal)
    created = await thread_created(deps, tenant, agency_id, thread_id)
    if (ended := await thread_terminated(deps, tenant, thread_id)) is not None:
        why = f" ({ended.reason[:200]})" if ended.reason else ""
        raise ClientException(
            status_code=409,
            detail=f"thread {thread_id} is terminated{why}: it takes no new runs or messages",
        )
    await deps.limiter.admit(deps.pool, tenant, thread_id)
    data = data or InvokeBody()
    if data.thread_id is not None and data.thread_id != thread_id:
        raise ClientException(
            status_code=409,
            detail=f"body threadId {data.thread_id[:64]!r} is not the thread of the path "
            f"{thread_id!r}",
        )
    if data.agent_type is not None and data.agent_type != created.agent_type:
        raise ClientException(
            status_code=409,
            detail=f"body agentType {data.agent_type[:64]!r} is not the thread's agent type "
            f"{created.agent_type!r}",
        )
    key = data.idempotency_key or header_key(idempotency_header) or new_id()
    started = await start_run(
        deps, tenant, agency_id, thread_id, key, data.chat(), data.files, data.strategy
    )
    refuse_if_limited(started)
    return started


COMMAND_ROUTES = [
    create_tenant,
    create_agency,
    save_blueprint,
    create_thread,
    invoke,
]


def _request_context(request: Request[Any, Any, Any]) -> dict[str, str]:
    headers = request.headers
    context = {
        "userAgent": headers.get("user-agent", ""),
        "origin": headers.get("origin", ""),
        "referrer": headers.get("referer", ""),
        "ip": request.client.host if request.client else "",
    }
    return {k: v[:500] for k, v in context.items() if v}
