"""Which agency, thread and assistant a LangGraph request is about.

LangGraph has no agencies. The agency is, in this order: the one named by the
`x-agency-id` header (`get_client(headers={"x-agency-id": …})`); else the tenant's agency
named `default` (the one `agency threads create` uses); else the tenant's only agency.
A thread names its own agency, so thread and run routes need no rule.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from litestar import Request
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException, ValidationException
from litestar.params import PathParameter
from ulid import ULID

from agency.contracts.errors import InvalidToken
from agency.contracts.events.thread import end_user_problem
from agency.contracts.ids import new_id, validate_token
from agency.infra.keystore import new_root_id
from agency.projections import agency_queries
from agency.services.api.auth import Caller, Deps, agency_owned, path_id, tenant_of
from agency.services.api.deps import ApiDeps, Principal
from agency.services.api.langgraph.graphstate import GraphView, fold_view
from agency.services.api.langgraph.prune import pruned_before, refuse_pruned
from agency.services.api.langgraph.wire import Assistant, Connection
from agency.services.api.thread_create import create_root_thread
from agency.services.threads.erasure import refuse_if_deleted

AGENCY_HEADER = "x-agency-id"
# Threads created without an assistant get an id with this prefix and exist in the log from
# their first run, which binds them to its assistant. Until then nothing is stored: the id
# itself says whose it is (`lgt_<ulid>_<binding>`, the binding a digest of tenant and
# ulid), so another tenant's such id is not found. A tenant can make up ids bound to
# itself only, which name nothing of anyone else's.
DEFERRED_PREFIX = "lgt_"
_BINDING_CHARS = 16
AssistantIdPath = Annotated[str, PathParameter(name="assistant_id")]
ThreadIdPath = Annotated[str, PathParameter(name="thread_id")]
RunIdPath = Annotated[str, PathParameter(name="run_id")]
CheckpointIdPath = Annotated[str, PathParameter(name="checkpoint_id")]
DEFAULT_AGENCY = "default"

# LangGraph's thread metadata key naming the end user the thread serves.
END_USER_KEY = "user_id"


async def agency_for(deps: ApiDeps, tenant: str, request: Connection) -> str:
    named = request.headers.get(AGENCY_HEADER)
    if named:
        agency_id = path_id("agency id", named)
        await agency_owned(deps, tenant, agency_id)
        return agency_id
    async with deps.pool.acquire() as conn:
        agencies = await agency_queries.list_agencies(conn, tenant)
    defaults = [a for a in agencies if a.name == DEFAULT_AGENCY]
    if defaults:
        return defaults[0].id
    if len(agencies) == 1:
        return agencies[0].id
    raise ValidationException(
        f"this tenant has {len(agencies)} agencies and none named {DEFAULT_AGENCY!r}: "
        f"send the `{AGENCY_HEADER}` header to name one"
    )


@dataclass(frozen=True, slots=True)
class AgencyCaller:
    """Who calls a route, and the agency their request is about (`agency_for`), read when
    asked for: a route checks its body first."""

    principal: Principal
    deps: ApiDeps
    request: Connection

    @property
    def tenant(self) -> str:
        return tenant_of(self.principal)

    async def agency(self) -> str:
        return await agency_for(self.deps, self.tenant, self.request)


def provide_agency_caller(
    principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> AgencyCaller:
    return AgencyCaller(principal, deps, request)


# How a route declares the dependency the LangGraph router registers as `caller`.
LgCaller = NamedDependency[AgencyCaller]


def thread_id_of(value: str) -> str:
    try:
        return validate_token("thread id", value)
    except InvalidToken as e:
        raise ValidationException(str(e)) from e


def _binding(tenant: str, ulid: str) -> str:
    return hashlib.sha256(f"{tenant}:{ulid}".encode()).hexdigest()[:_BINDING_CHARS]


def deferred_thread_id(tenant: str) -> str:
    ulid = new_id()
    return f"{DEFERRED_PREFIX}{ulid}_{_binding(tenant, ulid)}"


def deferred_view(tenant: str, thread_id: str) -> GraphView | None:
    """A thread of this tenant created without an assistant, before its first run: idle
    and empty. None for any other id (another tenant's is not this tenant's)."""
    ulid, sep, binding = thread_id.removeprefix(DEFERRED_PREFIX).partition("_")
    if not thread_id.startswith(DEFERRED_PREFIX) or not sep:
        return None
    if not hmac.compare_digest(binding, _binding(tenant, ulid)):
        return None
    try:
        since = ULID.from_str(ulid).datetime
    except ValueError:
        return None
    view = GraphView(tenant_id=tenant, thread_id=thread_id)
    view.created_at = view.updated_at = since
    return view


def awaiting_view(tenant: str, thread_id: str) -> GraphView:
    """A thread a client named that its first run creates: idle and empty until then."""
    view = GraphView(tenant_id=tenant, thread_id=thread_id)
    view.created_at = view.updated_at = datetime.now(UTC)
    return view


async def load_thread(
    deps: ApiDeps,
    tenant: str,
    thread_id: str,
    upto_seq: int | None = None,
    *,
    deferred: bool = False,
) -> GraphView:
    """The thread folded from its log (up to `upto_seq`), or 404 if the tenant has none.
    With `deferred`, a thread awaiting its first run reads as idle and empty (its
    `created` is None)."""
    thread_id = thread_id_of(thread_id)
    if upto_seq is None:
        view = await deps.graph_views.load(tenant, thread_id)
    else:
        events = await deps.bus.store.read(tenant, "thread", thread_id)
        oldest = pruned_before(events)
        refuse_pruned(thread_id, upto_seq, oldest)
        view = fold_view(tenant, thread_id, events, upto_seq)
        view.pruned_before = oldest
    if view.state.deleted:
        await refuse_if_deleted(deps.bus, tenant, thread_id)
    if view.created is None:
        await refuse_if_deleted(deps.bus, tenant, thread_id)
        pending = deferred_view(tenant, thread_id) if deferred else None
        if pending is not None:
            return pending
        raise NotFoundException(f"thread {thread_id} not found")
    return view


async def assistants(deps: ApiDeps, tenant: str, agency_id: str) -> list[Assistant]:
    """The agency's blueprints as assistants: static ones, overridden by the agency's own."""
    async with deps.pool.acquire() as conn:
        agency = await agency_queries.get_agency(conn, tenant, agency_id)
        dynamic = await agency_queries.list_blueprints(conn, tenant, agency_id)
    if agency is None:
        raise NotFoundException(f"agency {agency_id} not found")
    return [
        assistant(view, agency_id, agency.created_at)
        for view in agency_queries.merge_blueprints(deps.system.blueprints, dynamic)
    ]


def client_fields(
    metadata: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A blueprint's metadata as an assistant's: its own keys, and the `config` and
    `context` kept under `langgraph`."""
    own = {k: v for k, v in metadata.items() if k != "langgraph"}
    kept = metadata.get("langgraph")
    section = kept if isinstance(kept, dict) else {}
    return own, section.get("config") or {}, section.get("context") or {}


def assistant(view: agency_queries.BlueprintView, agency_id: str, since: datetime) -> Assistant:
    """The blueprint as an assistant: its own metadata, then what Agency knows of it (its
    agency, source, model, tags and type); the `config` and `context` it was given, kept
    under its metadata's `langgraph`."""
    own, config, context = client_fields(view.metadata)
    return Assistant(
        assistant_id=view.name,
        graph_id=view.name,
        config=config,
        context=context,
        created_at=since,
        updated_at=view.updated_at or since,
        metadata={
            **own,
            "agency_id": agency_id,
            "source": view.source,
            "model": view.model,
            "tags": list(view.tags),
            "type": view.type,
        },
        version=view.revision or 1,
        name=view.title or view.name,
        description=view.description or None,
    )


async def assistant_named(deps: ApiDeps, tenant: str, agency_id: str, name: str) -> Assistant:
    for found in await assistants(deps, tenant, agency_id):
        if found.assistant_id == name:
            return found
    raise _no_assistant(agency_id, name)


async def agent_type_named(deps: ApiDeps, tenant: str, agency_id: str, name: str) -> str:
    """The agent type of the assistant `name` (a blueprint of the agency, static or its
    own), without building every assistant; 404 if the agency has none of that name. One
    of the agency's own, found, is kept a while (`deps.known`)."""
    if name not in deps.system.blueprints and not deps.known.has_blueprint(tenant, agency_id, name):
        async with deps.pool.acquire() as conn:
            stored = await agency_queries.get_blueprint(conn, tenant, agency_id, name)
        if stored is None:
            raise _no_assistant(agency_id, name)
        deps.known.found_blueprint(tenant, agency_id, name)
    return name


def _no_assistant(agency_id: str, name: str) -> NotFoundException:
    return NotFoundException(
        f"assistant {name[:80]!r} not found in agency {agency_id}: assistants are the "
        "agency's blueprints, by name"
    )


async def new_thread(
    deps: ApiDeps,
    tenant: str,
    agency_id: str,
    agent_type: str,
    metadata: dict[str, str],
    thread_id: str | None = None,
) -> GraphView:
    """Create a thread of `agent_type`, answered once its log has it: every LangGraph
    thread route reads the log, and a search waits for the read models to list it
    (`services/api/thread_create.py`)."""
    thread_id = thread_id or new_root_id(tenant)
    user = metadata.get(END_USER_KEY)
    if user is not None and (problem := end_user_problem(user)) is not None:
        raise ValidationException(f"metadata.{END_USER_KEY} {problem}")
    created = await create_root_thread(
        deps, tenant, agency_id, thread_id, agent_type, metadata, listed=False,
        end_user_id=user,
    )  # fmt: skip
    view = fold_view(tenant, thread_id, [created.event])
    deps.graph_views.keep(view)
    return view
