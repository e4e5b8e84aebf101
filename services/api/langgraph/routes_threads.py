"""Assistants and threads of the LangGraph Agent Server API, on our blueprints and threads."""

from __future__ import annotations

import json
from typing import Any

import msgspec
from litestar import Request, get
from litestar.exceptions import (
    ClientException,
    NotFoundException,
    ValidationException,
)
from litestar.params import JSONBody

from agency.infra.keystore import new_root_id
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.graphstate import GraphView, is_checkpoint
from agency.services.api.langgraph.prune import pruned_before
from agency.services.api.langgraph.routes_thread_state import apply_supersteps
from agency.services.api.langgraph.scope import (
    AGENCY_HEADER,
    AgencyCaller,
    AssistantIdPath,
    CheckpointIdPath,
    LgCaller,
    ThreadIdPath,
    agency_for,
    agent_type_named,
    assistant_named,
    assistants,
    deferred_thread_id,
    deferred_view,
    load_thread,
    new_thread,
    thread_id_of,
)
from agency.services.api.langgraph.snapshot import state_out, thread_out
from agency.services.api.langgraph.ttl import set_ttl, ttl_seconds
from agency.services.api.langgraph.wire import (
    MAX_PAGE,
    Assistant,
    AssistantSearch,
    HistoryBody,
    Thread,
    ThreadCreate,
    ThreadSearch,
    ThreadState,
)
from agency.services.threads.erasure import ThreadGone, refuse_if_deleted

# Keys of thread metadata that name the assistant a new thread is bound to.
ASSISTANT_KEYS = ("graph_id", "assistant_id")


def _matches(metadata: dict[str, Any], wanted: dict[str, Any] | None) -> bool:
    return all(metadata.get(k) == v for k, v in (wanted or {}).items())


@post_ok("/assistants/search", summary="LangGraph: search assistants (blueprints)")
async def search_assistants(
    data: JSONBody[AssistantSearch], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> list[Assistant]:
    tenant = tenant_of(principal)
    limit, offset = data.checked()
    found = [
        a
        for a in await assistants(deps, tenant, await agency_for(deps, tenant, request))
        if (data.graph_id is None or a.graph_id == data.graph_id)
        and (data.name is None or a.name == data.name)
        and _matches(a.metadata, data.metadata)
    ]
    key = data.sort_by if data.sort_by in ("assistant_id", "graph_id", "name") else "created_at"
    found.sort(key=lambda a: (str(getattr(a, key)), a.name), reverse=data.sort_order == "desc")
    return found[offset : offset + limit]


@get("/assistants/{assistant_id:str}", summary="LangGraph: an assistant (a blueprint, by name)")
async def get_assistant(
    assistant_id: AssistantIdPath, principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> Assistant:
    tenant = tenant_of(principal)
    return await assistant_named(
        deps, tenant, await agency_for(deps, tenant, request), assistant_id
    )


async def _agent_type(deps: ApiDeps, tenant: str, agency_id: str, metadata: dict[str, Any]) -> str:
    named = next((metadata[k] for k in ASSISTANT_KEYS if metadata.get(k)), None)
    if isinstance(named, str):
        return await agent_type_named(deps, tenant, agency_id, named)
    known = await assistants(deps, tenant, agency_id)
    if len(known) == 1:
        return known[0].assistant_id
    raise ValidationException(
        "an Agency thread belongs to one assistant: create it with "
        "`threads.create(graph_id=…)` (one of " + ", ".join(a.assistant_id for a in known) + ")"
    )


def _string_metadata(metadata: dict[str, Any]) -> dict[str, str]:
    wrong = [k for k, v in metadata.items() if not isinstance(v, str)]
    if wrong:
        raise ValidationException(
            f"thread metadata values must be strings; {wrong[0][:60]!r} is "
            f"{type(metadata[wrong[0]]).__name__}"
        )
    return dict(metadata)


@post_ok("/threads", summary="LangGraph: create a thread")
async def create_thread(
    data: JSONBody[ThreadCreate], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> Thread:
    tenant = tenant_of(principal)
    ttl = ttl_seconds(data.ttl)
    view, fresh = await _created(data, tenant, deps, request)
    if data.supersteps and fresh:
        view = await apply_supersteps(deps, tenant, view, data.supersteps)
    if ttl is not None and fresh:
        await set_ttl(deps, tenant, view, ttl)
    return thread_out(view)


async def _created(
    data: ThreadCreate, tenant: str, deps: ApiDeps, request: Request[Any, Any, Any]
) -> tuple[GraphView, bool]:
    """The thread `data` asks for, and whether it was created now: else it existed
    (`if_exists="do_nothing"`), or (named by no assistant, no id and no metadata, and
    without supersteps or a ttl to write) it is bound by its first run."""
    metadata = _string_metadata(data.metadata or {})
    if data.thread_id is not None:
        thread_id = thread_id_of(data.thread_id)
        try:
            existing = await load_thread(deps, tenant, thread_id)
        except NotFoundException:
            pass
        else:
            if data.if_exists == "do_nothing":
                return existing, False
            raise ClientException(status_code=409, detail=f"thread {thread_id} already exists")
    elif (data.supersteps or data.ttl) and not metadata:
        thread_id = new_root_id(tenant)  # its supersteps (or ttl) are written now: it exists now
    if data.thread_id is not None or ((data.supersteps or data.ttl) and not metadata):
        if not any(metadata.get(k) for k in ASSISTANT_KEYS):
            # Named by the client, no assistant: created now, of the agency's only (else
            # first) assistant; a run of another switches it (`start.begin_run`).
            agency_id = await agency_for(deps, tenant, request)
            known = sorted(a.assistant_id for a in await assistants(deps, tenant, agency_id))
            if not known:
                raise ValidationException(f"agency {agency_id} has no assistant to run")
            return await new_thread(deps, tenant, agency_id, known[0], metadata, thread_id), True
    elif not metadata:
        # No assistant named and nothing to keep: the thread is bound by its first run.
        if request.headers.get(AGENCY_HEADER):
            await agency_for(deps, tenant, request)  # an agency named must be the tenant's
        pending = deferred_view(tenant, deferred_thread_id(tenant))
        assert pending is not None
        return pending, False
    else:
        thread_id = new_root_id(tenant)
    agency_id = await agency_for(deps, tenant, request)
    agent_type = await _agent_type(deps, tenant, agency_id, metadata)
    request_metadata = {k: v for k, v in metadata.items() if k not in ASSISTANT_KEYS}
    created = await new_thread(deps, tenant, agency_id, agent_type, request_metadata, thread_id)
    return created, True


@get("/threads/{thread_id:str}", summary="LangGraph: a thread")
async def get_thread(thread_id: ThreadIdPath, principal: Caller, deps: Deps) -> Thread:
    return thread_out(await load_thread(deps, tenant_of(principal), thread_id, deferred=True))


@post_ok("/threads/search", summary="LangGraph: search the agency's threads")
async def search_threads(
    data: JSONBody[ThreadSearch], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> list[dict[str, Any]]:
    """Root threads of the agency (subagents' child threads are not listed), newest first;
    `metadata`, `status` and `values` (top-level keys equal) filter; `select` picks fields."""
    tenant = tenant_of(principal)
    limit, offset = data.checked()
    unknown = sorted(set(data.select or ()) - set(Thread.__struct_fields__))
    if unknown:
        raise ValidationException(
            f"select names {unknown[0][:40]!r}, not a thread field: "
            + ", ".join(Thread.__struct_fields__)
        )
    agency_id = await agency_for(deps, tenant, request)
    wanted = {
        k: v for k, v in (data.metadata or {}).items() if k not in ("graph_id", "assistant_id")
    }
    graph = next(
        ((data.metadata or {})[k] for k in ASSISTANT_KEYS if (data.metadata or {}).get(k)), None
    )
    order = "ASC" if data.sort_order == "asc" else "DESC"
    column = {"thread_id": "thread_id", "status": "status", "updated_at": "updated_at"}.get(
        data.sort_by or "", "created_at"
    )
    await deps.listings.listed(tenant, deps.settings.read_lag_timeout)
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT thread_id FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
            "AND parent_thread_id IS NULL AND request @> $3::jsonb "
            "AND ($4::text IS NULL OR agent_type = $4) "
            "AND ($5::text[] IS NULL OR thread_id = ANY($5)) "
            f"ORDER BY {column} {order}, thread_id {order} LIMIT $6",
            tenant,
            agency_id,
            json.dumps(wanted),
            graph if isinstance(graph, str) else None,
            data.ids,
            # Statuses and values come from the log: then read until the page is full.
            None if data.status or data.values else offset + limit,
        )
    found: list[dict[str, Any]] = []
    skipped = 0
    for row in rows:
        try:
            view = await load_thread(deps, tenant, row["thread_id"])
        except ThreadGone:
            continue  # deleted: listed still until the read models see it
        thread = thread_out(view)
        if data.status is not None and thread.status != data.status:
            continue
        if not _matches(thread.values, data.values):
            continue
        if skipped < offset:
            skipped += 1
            continue
        whole = msgspec.to_builtins(thread)
        found.append({k: whole[k] for k in data.select} if data.select else whole)
        if len(found) == limit:
            break
    return found


@get("/threads/{thread_id:str}/state", summary="LangGraph: a thread's current state")
async def get_state(thread_id: ThreadIdPath, caller: LgCaller) -> ThreadState:
    return await _state_at(caller, thread_id, None)


@get(
    "/threads/{thread_id:str}/state/{checkpoint_id:str}",
    summary="LangGraph: a thread's state at a checkpoint (an event seq)",
)
async def get_state_at(
    thread_id: ThreadIdPath, checkpoint_id: CheckpointIdPath, caller: LgCaller
) -> ThreadState:
    return await _state_at(caller, thread_id, _seq(checkpoint_id))


class CheckpointBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    checkpoint: dict[str, Any]
    subgraphs: bool = False
    select: list[str] | None = None


@post_ok(
    "/threads/{thread_id:str}/state/checkpoint",
    summary="LangGraph: a thread's state at a checkpoint",
)
async def post_state_at(
    thread_id: ThreadIdPath, data: JSONBody[CheckpointBody], caller: LgCaller
) -> ThreadState:
    seq = data.checkpoint.get("checkpoint_id")
    upto = _seq(seq) if isinstance(seq, str) else None
    return await _state_at(caller, thread_id, upto)


def _seq(checkpoint_id: str) -> int:
    if not checkpoint_id.isdigit() or len(checkpoint_id) > 18:
        raise ValidationException(
            f"checkpoint_id {checkpoint_id[:40]!r} is not one of ours: an event seq (digits)"
        )
    return int(checkpoint_id)


async def _state_at(caller: AgencyCaller, thread_id: str, upto: int | None) -> ThreadState:
    tenant = caller.tenant
    return state_out(await load_thread(caller.deps, tenant, thread_id, upto, deferred=True))


@post_ok(
    "/threads/{thread_id:str}/history", summary="LangGraph: a thread's past states, newest first"
)
async def get_history(
    thread_id: ThreadIdPath, data: JSONBody[HistoryBody], principal: Caller, deps: Deps
) -> list[ThreadState]:
    """A checkpoint is the state after each event that changed the values (a message, a
    file, the todos), raised an interrupt or paused at a breakpoint; its id is that event's
    seq."""
    tenant = tenant_of(principal)
    if not 1 <= data.limit <= MAX_PAGE:
        raise ValidationException(f"limit must be 1 to {MAX_PAGE}")
    before = data.before
    if isinstance(before, dict):  # a checkpoint, or a config holding one
        before = before.get("checkpoint_id") or (before.get("configurable") or {}).get(
            "checkpoint_id"
        )
    bound = _seq(before) if isinstance(before, str) else None
    metadata = data.metadata or {}
    states = await history(deps, tenant, thread_id, bound, data.limit)
    return [s for s in states if _matches(s.metadata, metadata)]


async def history(
    deps: ApiDeps, tenant: str, thread_id: str, before: int | None, limit: int
) -> list[ThreadState]:
    """The thread's last `limit` checkpoints before the event `before` (all, when None),
    newest first, none of those pruned; 404 when the tenant has no such thread."""
    thread_id = thread_id_of(thread_id)
    events = await deps.bus.store.read(tenant, "thread", thread_id)
    # The checkpoints `threads.prune(strategy="keep_latest")` dropped are not listed.
    oldest = pruned_before(events)
    seqs = [e.seq for e in events if is_checkpoint(e) and e.seq >= oldest]
    chosen = set([s for s in seqs if before is None or s < before][-limit:])
    view = GraphView(tenant_id=tenant, thread_id=thread_id, pruned_before=oldest)
    states: list[ThreadState] = []
    for event in events:
        view.apply(event)
        if event.seq in chosen:
            states.append(state_out(view))
    if view.created is None:
        if deferred_view(tenant, thread_id) is not None:
            return []  # a thread awaiting its first run has no past
        await refuse_if_deleted(deps.bus, tenant, thread_id)
        raise NotFoundException(f"thread {thread_id} not found")
    return states[::-1]


THREAD_ROUTES = [
    search_assistants,
    get_assistant,
    create_thread,
    get_thread,
    search_threads,
    get_state,
    get_state_at,
    post_state_at,
    get_history,
]
