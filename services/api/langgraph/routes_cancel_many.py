"""`runs.cancel_many`: cancel the active runs of one thread, or of every thread of the
agency, each with `runtime.cancel` bound to that run (as `runs.cancel`).

Only a thread's active run can be canceled (a queued request starts when it ends): naming a
queued run is a 409 saying so, and `status="pending"` cancels nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Request, post
from litestar.exceptions import ClientException, ValidationException
from litestar.params import JSONBody, QueryParameter

from agency.contracts.commands import CancelRun
from agency.contracts.ids import new_id
from agency.services.api.auth import Caller, Deps, tenant_of
from agency.services.api.deps import ApiDeps
from agency.services.api.langgraph.graphstate import GraphView
from agency.services.api.langgraph.scope import agency_for, load_thread
from agency.services.api.langgraph.wire import Body

# Threads of the agency looked at, at most, when no thread is named.
MAX_THREADS = 1000


class CancelMany(Body, frozen=True, kw_only=True):
    thread_id: str | None = None
    run_ids: list[str] | None = None
    status: Literal["pending", "running", "all"] | None = None


async def _cancel(deps: ApiDeps, tenant: str, view: GraphView, run_ids: list[str] | None) -> None:
    active = view.state.active_run
    wanted = None if run_ids is None else {r.split("~", 1)[0] for r in run_ids}
    if wanted is not None:
        queued = sorted(
            r.run_id for r in view.state.runs
            if r.run_id in wanted and r.status == "registered"
        )  # fmt: skip
        if queued:
            raise ClientException(
                status_code=409,
                detail=f"run {queued[0]} is queued: only the thread's active run can be canceled",
            )
    if active is None or (wanted is not None and active.run_id not in wanted):
        return
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
    principal: Caller,
    deps: Deps,
    request: Request[Any, Any, Any],
    action: Annotated[str, QueryParameter(name="action", required=False)] = "interrupt",
) -> None:
    tenant = tenant_of(principal)
    if action == "rollback":
        raise ValidationException("cancel action 'rollback' does not map: the log is append-only")
    if data.thread_id is None and data.status is None:
        raise ValidationException("name the runs: `thread_id` (with `run_ids`) or `status`")
    if data.status == "pending":
        return  # queued runs are not canceled: each starts when the active one ends
    if data.thread_id is not None:
        await _cancel(deps, tenant, await load_thread(deps, tenant, data.thread_id), data.run_ids)
        return
    agency_id = await agency_for(deps, tenant, request)
    async with deps.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT thread_id FROM threads WHERE tenant_id = $1 AND agency_id = $2 "
            "AND active_run_id IS NOT NULL ORDER BY updated_at DESC LIMIT $3",
            tenant,
            agency_id,
            MAX_THREADS,
        )
    for row in rows:
        await _cancel(deps, tenant, await load_thread(deps, tenant, row["thread_id"]), None)


CANCEL_ROUTES = [cancel_many]
