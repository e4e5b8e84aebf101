"""Routes that change something: each sends one command onto the bus.

Creates wait (bounded by `read_your_writes_timeout`) until the read models have applied
what the command produced, so the caller can read what it wrote: 201. When the wait runs
out the command is still stored and will be applied: 202 with the same body. Everything
else answers 202 as soon as the command is stored.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, Response, post
from litestar.exceptions import ValidationException
from litestar.params import HeaderParameter, JSONBody

from contracts.commands import (
    ApproveToolCalls,
    CancelRun,
    CreateAgency,
    CreateTenant,
    CreateThread,
    InvokeThread,
    SaveBlueprint,
)
from contracts.envelope import utc_now
from contracts.events import BlueprintSaved, BlueprintSpec, ChatMessage, ToolCall
from contracts.events.registry import AgentKind, SideConfig
from contracts.events.thread import ConcurrencyStrategy
from contracts.ids import new_id
from contracts.subjects import Aggregate
from infra.jetstream.records import RecordedEvent
from projections import catalog
from projections.engine import CHECKPOINTS
from services.api.auth import (
    ADMIN_OPT,
    AgencyId,
    Caller,
    Deps,
    ThreadId,
    agency_events,
    agent_types,
    mint_api_key,
    path_id,
    require_admin,
    tenant_of,
    tenant_of_key,
    thread_created,
)
from services.api.deps import ApiDeps, Principal

NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
IdempotencyKey = Annotated[
    str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")
]
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Request bodies: camelCase on the wire, unknown fields refused."""


class Out(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Response bodies: camelCase on the wire."""


class CreateTenantBody(Body, frozen=True, kw_only=True):
    name: NonEmpty


class TenantOut(Out, frozen=True, kw_only=True):
    tenant_id: str
    api_key: str
    name: str


class CreateAgencyBody(Body, frozen=True, kw_only=True):
    name: NonEmpty
    metadata: dict[str, str] = {}


class AgencyOut(Out, frozen=True, kw_only=True):
    id: str
    name: str
    metadata: dict[str, str]
    created_at: datetime


class SaveBlueprintBody(Body, frozen=True, kw_only=True):
    """A `BlueprintSpec` in camelCase; the dual-AI sides keep the contract's own names."""

    name: Token
    description: str = ""
    prompt: str = ""
    model: str = ""
    tags: list[str] = []
    config: dict[str, Any] = {}
    type: AgentKind = "ai_human"
    side_a: SideConfig | None = None
    side_b: SideConfig | None = None
    max_session_turns: Annotated[int, msgspec.Meta(ge=1)] | None = None
    expose_as_tool: bool = False
    tool_description: str = ""

    def spec(self) -> BlueprintSpec:
        return BlueprintSpec(
            name=self.name,
            description=self.description,
            prompt=self.prompt,
            model=self.model,
            tags=tuple(self.tags),
            config=self.config,
            type=self.type,
            side_a=self.side_a,
            side_b=self.side_b,
            max_session_turns=self.max_session_turns,
            expose_as_tool=self.expose_as_tool,
            tool_description=self.tool_description,
        )


class BlueprintOut(Out, frozen=True, kw_only=True):
    name: str
    description: str
    prompt: str
    model: str
    tags: list[str]
    config: dict[str, Any]
    type: AgentKind
    side_a: SideConfig | None
    side_b: SideConfig | None
    max_session_turns: int | None
    expose_as_tool: bool
    tool_description: str
    revision: int | None


class CreateThreadBody(Body, frozen=True, kw_only=True):
    agent_type: NonEmpty
    metadata: dict[str, str] = {}


class ThreadOut(Out, frozen=True, kw_only=True):
    id: str
    agent_type: str
    agency_id: str
    created_at: datetime
    metadata: dict[str, str]


class MessageIn(Body, frozen=True, kw_only=True):
    content: str
    role: Literal["user", "system", "assistant"] = "user"


class InvokeBody(Body, frozen=True, kw_only=True):
    messages: list[MessageIn] = []
    files: dict[str, str] = {}
    idempotency_key: IdempotencyKey | None = None
    strategy: ConcurrencyStrategy = "queue"


class Accepted(Out, frozen=True, kw_only=True):
    status: Literal["accepted"] = "accepted"


class RunAccepted(Out, frozen=True, kw_only=True):
    run_id: str
    status: Literal["accepted"] = "accepted"


class ToolCallIn(Body, frozen=True, kw_only=True):
    id: NonEmpty
    name: NonEmpty
    args: dict[str, Any] = {}


class ApproveBody(Body, frozen=True, kw_only=True):
    approved: bool
    modified_tool_calls: list[ToolCallIn] | None = None
    reason: str = ""


class CancelBody(Body, frozen=True, kw_only=True):
    reason: str = ""


def run_id_for(tenant: str, thread_id: str, key: str) -> str:
    """The run an idempotency key starts: the same key always names the same run, so a
    repeat is answered without looking anything up."""
    digest = hashlib.sha256(f"{tenant}\x00{thread_id}\x00{key}".encode()).digest()
    return "run_" + base64.b32encode(digest).decode()[:26]


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
    await deps.bus.commands.send(tenant, command, idempotency_key=tenant)

    async def key_works() -> bool:
        return await tenant_of_key(deps, key_id, key_hash) == tenant

    works = await _poll(key_works, deps.settings.read_your_writes_timeout)
    body = TenantOut(tenant_id=tenant, api_key=key, name=data.name)
    return Response(body, status_code=201 if works else 202)


@post("/agencies", status_code=201, summary="Create an agency")
async def create_agency(
    data: JSONBody[CreateAgencyBody], principal: Caller, deps: Deps
) -> Response[AgencyOut]:
    tenant = tenant_of(principal)
    agency_id, key = new_id(), new_id()
    command = CreateAgency(agency_id=agency_id, name=data.name, metadata=data.metadata)
    await deps.bus.commands.send(tenant, command, idempotency_key=key)
    event, readable = await _read_your_write(deps, tenant, "agency", agency_id, key)
    created_at = event.envelope.ts if event else utc_now()
    body = AgencyOut(id=agency_id, name=data.name, metadata=data.metadata, created_at=created_at)
    return Response(body, status_code=201 if readable else 202)


@post(
    "/agency/{agencyId:str}/blueprints",
    status_code=201,
    summary="Save a blueprint of the agency (overrides a static one of the same name)",
)
async def save_blueprint(
    agency_id: AgencyId, data: JSONBody[SaveBlueprintBody], principal: Caller, deps: Deps
) -> Response[BlueprintOut]:
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    await agency_events(deps, tenant, agency_id)
    spec = data.spec()
    key = new_id()
    command = SaveBlueprint(agency_id=agency_id, blueprint=spec)
    await deps.bus.commands.send(tenant, command, idempotency_key=key)
    event, readable = await _read_your_write(deps, tenant, "agency", agency_id, key)
    saved = event.payload if event and isinstance(event.payload, BlueprintSaved) else None
    body = BlueprintOut(
        name=spec.name,
        description=spec.description,
        prompt=spec.prompt,
        model=spec.model,
        tags=list(spec.tags),
        config=spec.config,
        type=spec.type,
        side_a=spec.side_a,
        side_b=spec.side_b,
        max_session_turns=spec.max_session_turns,
        expose_as_tool=spec.expose_as_tool,
        tool_description=spec.tool_description,
        revision=saved.revision if saved else None,
    )
    return Response(body, status_code=201 if readable else 202)


@post("/agency/{agencyId:str}/agents", status_code=201, summary="Create a thread")
async def create_thread(
    agency_id: AgencyId,
    data: JSONBody[CreateThreadBody],
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, Any],
) -> Response[ThreadOut]:
    tenant = tenant_of(principal)
    agency_id = path_id("agency id", agency_id)
    known = agent_types(deps, await agency_events(deps, tenant, agency_id))
    if data.agent_type not in known:
        raise ValidationException(
            f"unknown agentType {data.agent_type!r}: agency {agency_id} has "
            f"{', '.join(sorted(known)) or 'no blueprints'}; save a blueprint first"
        )
    thread_id, key = new_id(), new_id()
    command = CreateThread(
        agency_id=agency_id,
        thread_id=thread_id,
        agent_type=data.agent_type,
        # The command has no metadata field of its own; the request context carries it.
        request={**data.metadata, **_request_context(request)},
    )
    await deps.bus.commands.send(tenant, command, idempotency_key=key)
    event, readable = await _read_your_write(deps, tenant, "thread", thread_id, key)
    body = ThreadOut(
        id=thread_id,
        agent_type=data.agent_type,
        agency_id=agency_id,
        created_at=event.envelope.ts if event else utc_now(),
        metadata=data.metadata,
    )
    return Response(body, status_code=201 if readable else 202)


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/invoke",
    status_code=202,
    summary="Start a run with new messages and files",
    description=(
        "The idempotency key comes from the body or the `Idempotency-Key` header (the body "
        "wins). The same key always answers the same runId and starts at most one run."
    ),
)
async def invoke(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    data: JSONBody[InvokeBody | None] = None,
    idempotency_header: Annotated[
        str | None,
        HeaderParameter(
            name="Idempotency-Key",
            required=False,
            description="The request's idempotency key, when the body has none.",
        ),
    ] = None,
) -> RunAccepted:
    tenant, agency_id, thread_id = await _thread(principal, deps, agency_id, thread_id)
    data = data or InvokeBody()
    key = data.idempotency_key or _header_key(idempotency_header) or new_id()
    run_id = run_id_for(tenant, thread_id, key)
    command = InvokeThread(
        agency_id=agency_id,
        thread_id=thread_id,
        run_id=run_id,
        messages=tuple(ChatMessage(role=m.role, content=m.content) for m in data.messages),
        files=data.files,
        strategy=data.strategy,
    )
    # The broker dedupes command ids per tenant, not per thread: the same key sent to two
    # threads is two requests, so the thread is part of the key on the bus.
    await deps.bus.commands.send(tenant, command, idempotency_key=f"{thread_id}:{key}")
    return RunAccepted(run_id=run_id)


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/approve",
    status_code=202,
    summary="Approve or reject the tool calls a paused run proposed",
)
async def approve(
    agency_id: AgencyId,
    thread_id: ThreadId,
    data: JSONBody[ApproveBody],
    principal: Caller,
    deps: Deps,
) -> Accepted:
    tenant, agency_id, thread_id = await _thread(principal, deps, agency_id, thread_id)
    calls = data.modified_tool_calls
    command = ApproveToolCalls(
        agency_id=agency_id,
        thread_id=thread_id,
        approved=data.approved,
        modified_tool_calls=None
        if calls is None
        else tuple(ToolCall(id=c.id, name=c.name, arguments=json.dumps(c.args)) for c in calls),
        reason=data.reason,
    )
    await deps.bus.commands.send(tenant, command)
    return Accepted()


@post(
    "/agency/{agencyId:str}/agent/{threadId:str}/cancel",
    status_code=202,
    summary="Cancel the thread's active run (and its subagents)",
)
async def cancel(
    agency_id: AgencyId,
    thread_id: ThreadId,
    principal: Caller,
    deps: Deps,
    data: JSONBody[CancelBody | None] = None,
) -> Accepted:
    tenant, agency_id, thread_id = await _thread(principal, deps, agency_id, thread_id)
    reason = data.reason if data else ""
    command = CancelRun(agency_id=agency_id, thread_id=thread_id, reason=reason)
    await deps.bus.commands.send(tenant, command)
    return Accepted()


COMMAND_ROUTES = [
    create_tenant,
    create_agency,
    save_blueprint,
    create_thread,
    invoke,
    approve,
    cancel,
]


def _header_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not _KEY.match(value):
        raise ValidationException(
            "Idempotency-Key must be 1 to 200 printable ASCII characters without spaces"
        )
    return value


def _request_context(request: Request[Any, Any, Any]) -> dict[str, str]:
    headers = request.headers
    context = {
        "userAgent": headers.get("user-agent", ""),
        "origin": headers.get("origin", ""),
        "referrer": headers.get("referer", ""),
        "ip": request.client.host if request.client else "",
    }
    return {k: v[:500] for k, v in context.items() if v}


async def _thread(
    principal: Principal, deps: ApiDeps, agency_id: str, thread_id: str
) -> tuple[str, str, str]:
    """(tenant, agency id, thread id) of a thread the caller owns; 400 / 403 / 404 otherwise."""
    tenant = tenant_of(principal)
    await thread_created(deps, tenant, agency_id, thread_id)
    return tenant, agency_id, thread_id


async def _read_your_write(
    deps: ApiDeps, tenant: str, aggregate: Aggregate, aggregate_id: str, key: str
) -> tuple[RecordedEvent | None, bool]:
    """Wait for the event our command produced (the registry stores the command's key on
    it), then for every projection handling its type to have passed it. Returns the event
    if it was seen, and whether it is readable, within `read_your_writes_timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deps.settings.read_your_writes_timeout
    found: RecordedEvent | None = None

    async def stored() -> bool:
        nonlocal found
        events = await deps.bus.store.read(tenant, aggregate, aggregate_id)
        found = next((e for e in events if e.envelope.idempotency_key == key), None)
        return found is not None

    if not await _poll(stored, deadline - loop.time()):
        return None, False
    assert found is not None
    event: RecordedEvent = found
    names = [p.name for p in catalog.ALL if p.wants(event.type)]

    async def projected() -> bool:
        async with deps.pool.acquire() as conn:
            done = await conn.fetchval(
                f"SELECT count(*) FROM {CHECKPOINTS} WHERE name = ANY($1) AND stream_seq >= $2",
                names,
                event.stream_seq,
            )
        return int(done) == len(names)

    return event, await _poll(projected, deadline - loop.time())


async def _poll(check: Callable[[], Awaitable[bool]], timeout: float) -> bool:
    """Call `check` until it answers True, backing off from 10 to 200 ms, within `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout, 0.0)
    delay = 0.01
    while True:
        if await check():
            return True
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.2)
