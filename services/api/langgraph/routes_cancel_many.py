"""`runs.cancel_many`: cancel the runs of one thread, or of every thread of the agency,
each with `runtime.cancel` bound to that run (as `runs.cancel`).

`status="running"` selects the active runs, `"pending"` the queued ones and those asked for
later (`after_seconds`; withdrawn: they never start nor join the active run), `"all"` both;
named `run_ids` are canceled whichever they are.
"""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import post
from litestar.exceptions import ValidationException
from litestar.params import JSONBody, QueryParameter

from agency.contracts.commands import CancelRun
from agency.contracts.ids import new_id
from agency.services.api.auth import Deps
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.scope import LgCaller, load_thread
from agency.services.api.langgraph.wire import Body

# Threads of the agency looked at, at most, when no thread is named.
MAX_THREADS = 1000

# The agency's threads that may hold a run to cancel: a busy one (its active run, the
# queued behind it), or one with a run asked for later (`run.delayed`) of which nothing
# followed (neither its start nor its cancel), idle as it waits. The thread's log decides.
_CANDIDATES = """
SELECT thread_id FROM (
    SELECT thread_id, updated_at FROM threads
    WHERE tenant_id = $1 AND agency_id = $2 AND active_run_id IS NOT NULL
    UNION
    SELECT t.thread_id, t.updated_at FROM events d
    JOIN threads t ON t.tenant_id = d.tenant_id AND t.thread_id = d.aggregate_id
    WHERE d.tenant_id = $1 AND d.aggregate = 'thread' AND d.type = 'run.delayed'
      AND t.agency_id = $2
      AND NOT EXISTS (
          SELECT 1 FROM events x
          WHERE x.tenant_id = d.tenant_id AND x.aggregate = 'thread'
            AND x.aggregate_id = d.aggregate_id AND x.seq > d.seq AND x.run_id = d.run_id
      )
) AS candidates
ORDER BY updated_at DESC LIMIT $3
"""


Status = Literal["pending", "running", "all"]


class CancelMany(Body, frozen=True, kw_only=True):
    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Status | None = None


async def _cancel(
    deps: ApiDeps, tenant: str, view: GraphView, run_ids: list[str] | None, status: Status | None
) -> None:
    """Cancel the thread's runs named by `run_ids` (all when None) that `status` selects:
    the active one (`running`), the queued ones (`pending`), or both. The queued go first,
    so that none of them joins the active run as it ends."""
    wanted = None if run_ids is None else {r.split("~", 1)[0] for r in run_ids}
    if status in ("pending", "all") or wanted is not None:
        # Queued behind the active run, or asked for to start later (`after_seconds`).
        waiting = [q.run_id for q in view.state.queue] + [r.run_id for r in view.state.delayed()]
        for run_id in waiting:
            if wanted is None or run_id in wanted:
                await send_cancel(deps, tenant, view, run_id)
    active = view.state.active_run
    if status == "pending" or active is None:
        return
    if wanted is None or active.run_id in wanted:
        await send_cancel(deps, tenant, view, active.run_id)


async def send_cancel(deps: ApiDeps, tenant: str, view: GraphView, run_id: str) -> None:
    """Send `runtime.cancel` bound to the thread's run `run_id`."""
    assert view.created is not None
    command = CancelRun(
        agency_id=view.created.agency_id,
        thread_id=view.thread_id,
        reason="canceled by request",
        run_id=run_id,
    )
    await deps.bus.commands.send(tenant, command, idempotency_key=new_id())


@post("/runs/cancel", status_code=204, summary="LangGraph: cancel the active runs")
async def cancel_many(
    data: JSONBody[CancelMany],
    caller: LgCaller,
    deps: Deps,
    action: Annotated[str, QueryParameter(name="action", required=False)] = "interrupt",
) -> None:
    tenant = caller.tenant
    if action == "rollback":
        raise ValidationException("cancel action 'rollback' does not map: the log is append-only")
    if data.thread_id is None and data.status is None:
        raise ValidationException("name the runs: `thread_id` (with `run_ids`) or `status`")
    if data.thread_id is not None:
        view = await load_thread(deps, tenant, data.thread_id)
        await _cancel(deps, tenant, view, data.run_ids, data.status)
        return
    agency_id = await caller.agency()
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(_CANDIDATES, tenant, agency_id, MAX_THREADS)
    for row in rows:
        view = await load_thread(deps, tenant, row["thread_id"])
        await _cancel(deps, tenant, view, None, data.status)


CANCEL_ROUTES = [cancel_many]
