"""Threads of the LangGraph Agent Server API changed, counted, copied: facts on the log.

- `threads.update(metadata=…)` sets keys of the thread's metadata: `registry.set_thread_metadata`,
  a `thread.metadata_set` on the thread's log.
- `threads.copy` is a fork of the thread at its last event (`registry.fork_thread`).
- `threads.count` counts what `threads.search` lists.
- `threads.delete` deletes the thread and its subagent tree (`DELETE /threads/{threadId}`,
  docs/data.md): their data key destroyed, reads answer 410 afterwards. `threads.prune`
  (strategy `delete`) deletes each thread it names the same way; `keep_latest` drops
  their past checkpoints from what LangGraph reads (`prune.py`).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from litestar import Request, Response, delete, patch
from litestar.exceptions import ClientException, NotFoundException, ValidationException
from litestar.params import JSONBody

from agency.contracts.commands import ForkThread, SetThreadMetadata
from agency.contracts.ids import new_id
from agency.projections import catalog
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.answer import post_ok
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.prune import prune_history, refuse_pruned
from agency.services.api.langgraph.scope import (
    RunIdPath,
    ThreadIdPath,
    agency_for,
    deferred_thread_id,
    deferred_view,
    load_thread,
    thread_id_of,
)
from agency.services.api.langgraph.snapshot import thread_out
from agency.services.api.langgraph.ttl import set_ttl, ttl_seconds
from agency.services.api.langgraph.wire import Body, Thread, ThreadStatus
from agency.services.api.readback import send_and_read
from agency.services.api.routes_erasure import erase_thread, requester
from agency.services.api.routes_fork import send_fork
from agency.services.threads.erasure import ThreadGone
from agency.services.threads.fork import ForkError, plan_fork

# Keys of a thread's metadata that say what it is, not what its users set.
DERIVED_KEYS = ("graph_id", "assistant_id", "agency_id")
# The most threads one `threads.prune` erases.
MAX_PRUNED = 1000


class ThreadUpdate(Body, frozen=True, kw_only=True):
    metadata: dict[str, Any] | None = None
    ttl: dict[str, Any] | None = None


class ThreadPrune(Body, frozen=True, kw_only=True):
    thread_ids: list[str]
    strategy: str = "delete"


class ThreadCount(Body, frozen=True, kw_only=True):
    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    status: ThreadStatus | None = None


@patch("/threads/{thread_id:str}", summary="LangGraph: set keys of a thread's metadata")
async def update_thread(
    thread_id: ThreadIdPath,
    data: JSONBody[ThreadUpdate],
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, Any],
) -> Response[Thread | None]:
    tenant = tenant_of(principal)
    ttl = ttl_seconds(data.ttl)
    view = await load_thread(deps, tenant, thread_id, deferred=True)
    current = view.metadata()
    metadata = data.metadata or {}
    for key, value in metadata.items():
        if key in DERIVED_KEYS and current.get(key) != value:
            raise ClientException(
                status_code=409,
                detail=f"metadata {key!r} says what the thread is ({current.get(key)!r}); "
                "it cannot be changed",
            )
        if not isinstance(value, str):
            raise ValidationException(
                f"thread metadata values must be strings; {key[:60]!r} is {type(value).__name__}"
            )
    wanted = {k: v for k, v in metadata.items() if k not in DERIVED_KEYS}
    if wanted and view.created is None:
        raise ClientException(
            status_code=409,
            detail=f"thread {view.thread_id} is created by its first run: its metadata has "
            "nowhere to live until then (create it with `threads.create(graph_id=…)`)",
        )
    if wanted and any(current.get(k) != v for k, v in wanted.items()):
        assert view.created is not None
        key = new_id()
        command = SetThreadMetadata(
            agency_id=view.created.agency_id, thread_id=view.thread_id, metadata=wanted
        )
        await send_and_read(deps, tenant, "thread", view.thread_id, command, key)
        view = await load_thread(deps, tenant, view.thread_id)
    if ttl is not None:
        await set_ttl(deps, tenant, view, ttl)
        view = await load_thread(deps, tenant, view.thread_id)
    if request.headers.get("prefer") == "return=minimal":
        return Response(None, status_code=204)
    return Response(thread_out(view), status_code=200)


@delete("/threads/{thread_id:str}", status_code=204, summary="LangGraph: delete a thread")
async def delete_thread(thread_id: ThreadIdPath, principal: Caller, deps: Deps) -> None:
    """Erases the thread's tree as `DELETE /threads/{threadId}` does; a repeat is a no-op."""
    await erase_ours(deps, tenant_of(principal), [thread_id_of(thread_id)], requester(principal))


async def erase_ours(deps: ApiDeps, tenant: str, thread_ids: list[str], requested_by: str) -> None:
    """Erase each thread's tree (404 naming the first thread that is not the tenant's,
    before any is erased; one deleted already is a no-op), answering once the read models
    have dropped their rows (within `read_lag_timeout`)."""
    for thread_id in thread_ids:
        with contextlib.suppress(ThreadGone):  # deleted already: a repeat answers the same
            await load_thread(deps, tenant, thread_id, deferred=True)  # 404 if not ours
    last: dict[int, int] = {}  # by partition of the log
    for thread_id in thread_ids:
        deletion = await erase_thread(deps, tenant, thread_id, requested_by, may_be_empty=True)
        partition = deps.bus.layout.partition(thread_id)
        last[partition] = max(last.get(partition, 0), deletion.stream_seq)
    for partition, seq in last.items():
        if seq:
            await deps.progress.wait_passed(
                catalog.NAMES, seq, deps.settings.read_lag_timeout, partition=partition
            )


@delete(
    "/threads/{thread_id:str}/runs/{run_id:str}",
    status_code=204,
    summary="LangGraph: delete a run (not mapped: the log is append-only)",
)
async def delete_run(
    thread_id: ThreadIdPath, run_id: RunIdPath, principal: Caller, deps: Deps
) -> None:
    await load_thread(deps, tenant_of(principal), thread_id)  # 404 if not ours
    raise ValidationException(
        "a run cannot be deleted: the log is append-only and keeps every run "
        "(`threads.delete` erases a whole thread)"
    )


@post_ok("/threads/prune", summary="LangGraph: delete threads, or their past checkpoints")
async def prune_threads(
    data: JSONBody[ThreadPrune], principal: Caller, deps: Deps
) -> dict[str, int]:
    """`strategy="delete"`: each thread's tree erased as `threads.delete` erases it;
    `"keep_latest"`: each thread keeps its latest checkpoint, its past ones are no longer
    read (`prune.py`). `pruned_count` counts the threads named (one pruned already counts,
    a repeat being harmless); a thread that is not the tenant's is 404 before any is
    pruned."""
    if data.strategy not in ("delete", "keep_latest"):
        raise ValidationException(
            f"prune strategy {data.strategy[:40]!r} is none of LangGraph's: 'delete' (the "
            "threads) or 'keep_latest' (their past checkpoints)"
        )
    if len(data.thread_ids) > MAX_PRUNED:
        raise ValidationException(
            f"prune names {len(data.thread_ids)} threads; at most {MAX_PRUNED} a request"
        )
    tenant = tenant_of(principal)
    thread_ids = list(dict.fromkeys(thread_id_of(t) for t in data.thread_ids))
    if data.strategy == "delete":
        await erase_ours(deps, tenant, thread_ids, requester(principal))
    else:
        views = [await load_thread(deps, tenant, t, deferred=True) for t in thread_ids]
        for view in views:
            await prune_history(deps, tenant, view)
    return {"pruned_count": len(thread_ids)}


@post_ok("/threads/count", summary="LangGraph: count the agency's threads")
async def count_threads(
    data: JSONBody[ThreadCount], principal: Caller, deps: Deps, request: Request[Any, Any, Any]
) -> int:
    """Root threads of the agency, as `threads.search` lists them; `status` is read from
    each thread's log."""
    tenant = tenant_of(principal)
    if data.values:
        raise ValidationException("counting threads by `values` does not map onto Agency")
    agency_id = await agency_for(deps, tenant, request)
    given = data.metadata or {}
    wanted = {k: v for k, v in given.items() if k not in ("graph_id", "assistant_id")}
    graph = given.get("graph_id") or given.get("assistant_id")
    await deps.listings.listed(tenant, deps.settings.read_lag_timeout)
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT thread_id FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
            "AND parent_thread_id IS NULL AND request @> $3::jsonb "
            "AND ($4::text IS NULL OR agent_type = $4)",
            tenant,
            agency_id,
            json.dumps(wanted),
            graph if isinstance(graph, str) else None,
        )
    if data.status is None:
        return len(rows)
    count = 0
    for row in rows:
        view = await load_thread(deps, tenant, row["thread_id"])
        count += view.status() == data.status
    return count


@post_ok("/threads/{thread_id:str}/copy", summary="LangGraph: copy a thread")
async def copy_thread(thread_id: ThreadIdPath, principal: Caller, deps: Deps) -> Thread:
    """A fork of the thread at its last event: a new thread with the same history (a run
    in progress ends in the copy, canceled)."""
    tenant = tenant_of(principal)
    thread_id = thread_id_of(thread_id)
    view = await load_thread(deps, tenant, thread_id, deferred=True)
    if view.created is None:
        # Nothing to copy yet: another thread awaiting its first run.
        pending = deferred_view(tenant, deferred_thread_id(tenant))
        assert pending is not None
        return thread_out(pending)
    fork_id = await fork_thread(deps, tenant, view, view.last_seq)
    return thread_out(await load_thread(deps, tenant, fork_id))


async def fork_thread(deps: ApiDeps, tenant: str, view: GraphView, at_seq: int) -> str:
    """A new thread with `view`'s history up to `at_seq` (`registry.fork_thread`): its id,
    once written (bounded wait). 404 when the thread has no event `at_seq`, or its
    checkpoints there are pruned."""
    assert view.created is not None
    refuse_pruned(view.thread_id, at_seq, view.pruned_before)
    fork_id = new_id()
    try:
        plan = await plan_fork(deps.bus, tenant, view.thread_id, at_seq, fork_id=fork_id)
    except ForkError as e:
        raise NotFoundException(str(e)) from e
    command = ForkThread(
        agency_id=view.created.agency_id, thread_id=view.thread_id, at_seq=at_seq,
        fork_thread_id=fork_id,
    )  # fmt: skip
    await send_fork(deps, tenant, command, plan)
    return fork_id


THREAD_ADMIN_ROUTES = [
    update_thread,
    delete_thread,
    delete_run,
    prune_threads,
    count_threads,
    copy_thread,
]
